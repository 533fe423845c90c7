/**
 * A fault switch in front of the broker, for the demo and the tests: armed through the admin route
 * `POST /admin/faults/publish`, it makes the broker refuse (not retryably) the next messages of an
 * event type, optionally of one aggregate. The relay then marks them `failed` in the outbox, where
 * the outbox admin shows them and can retry them, on either broker.
 */
import { Errors, Publisher } from "@tidings/core"
import { Context, Effect, Layer, Schema } from "effect"
import { Broker } from "./transport.ts"

/** The body of `POST /admin/faults/publish`. */
export const FaultRequest = Schema.Struct({
  type: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(255)),
  aggregateId: Schema.optionalKey(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(255))),
  times: Schema.optionalKey(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 100 })))
})
export type FaultRequest = typeof FaultRequest.Type

/** An armed rule and how many more messages it refuses. */
export interface Rule {
  readonly type: string
  readonly aggregateId: string | undefined
  readonly remaining: number
}

/** The switch. */
export class PublishFaults extends Context.Service<PublishFaults, {
  readonly arm: (request: FaultRequest) => Effect.Effect<Rule>
  readonly rules: Effect.Effect<ReadonlyArray<Rule>>
  /** Messages refused so far. */
  readonly refused: Effect.Effect<number>
}>()("orders/PublishFaults") {}

/** The relay's `Publisher`: the broker's, behind the switch. */
export const layer: Layer.Layer<Publisher.Publisher | PublishFaults, never, Broker> = Layer.effectContext(
  Effect.gen(function*() {
    const broker = yield* Broker
    const rules: Array<{ type: string; aggregateId: string | undefined; remaining: number }> = []
    let refused = 0
    const publish: Publisher.Service["publish"] = (messages) =>
      Effect.suspend(() => {
        const refusedIds = new Map<string, Errors.PublishError>()
        for (const m of messages) {
          const rule = rules.find((r) =>
            r.remaining > 0 && r.type === m.type && (r.aggregateId === undefined || r.aggregateId === m.aggregateId)
          )
          if (rule === undefined) continue
          rule.remaining--
          refused++
          refusedIds.set(
            m.id,
            new Errors.PublishError({
              message: "refused by the fault switch (POST /admin/faults/publish)",
              reason: new Errors.Refused({ retryable: false })
            })
          )
        }
        if (refusedIds.size === 0) return broker.publisher.publish(messages)
        const rest = messages.filter((m) => !refusedIds.has(m.id))
        const published = rest.length === 0 ? Effect.succeed([]) : broker.publisher.publish(rest)
        return Effect.map(published, (results) => [
          ...results,
          ...[...refusedIds].map(([id, error]) => Publisher.rejected(id, error))
        ])
      })
    const faults = PublishFaults.of({
      arm: (request) =>
        Effect.sync(() => {
          const rule = { type: request.type, aggregateId: request.aggregateId, remaining: request.times ?? 1 }
          rules.push(rule)
          return { ...rule }
        }),
      rules: Effect.sync(() => rules.filter((r) => r.remaining > 0).map((r) => ({ ...r }))),
      refused: Effect.sync(() => refused)
    })
    return Context.make(PublishFaults, faults).pipe(
      Context.add(
        Publisher.Publisher,
        Publisher.Publisher.of({
          publish,
          ...(broker.publisher.destination === undefined ? {} : { destination: broker.publisher.destination })
        })
      )
    )
  })
)
