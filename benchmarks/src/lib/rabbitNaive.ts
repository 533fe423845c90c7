/**
 * The naive relay on RabbitMQ, the baseline the issue compares with: each poller claims a batch
 * through the same store, publishes the events one at a time on its own confirm channel, waiting for
 * each confirm (`waitForConfirms`) before the next, then marks the batch published. It hears the same
 * wake-ups as the Tidings relay, so that a comparison isolates the publish path.
 * @module
 */
import type * as OutboxStorePort from "@tidings/core/OutboxStore"
import type * as Wakeup from "@tidings/core/Wakeup"
import { Duration, Effect, type Scope } from "effect"
import { outgoing, rawConnection } from "./rabbit.ts"

/** Settings of {@link start}. */
export interface Options {
  readonly url: string
  readonly exchange: string
  readonly relays: number
  readonly batchSize: number
  readonly store: OutboxStorePort.Service
  readonly hub: Wakeup.Service
  /** Called with `performance.now()` right after each event's confirm. */
  readonly onConfirmed: (id: string, at: number) => void
}

const lease = Duration.seconds(30)

/** Starts `relays` naive pollers for as long as the scope lives. */
export const start = (opts: Options): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    const model = yield* rawConnection(opts.url)
    for (let i = 0; i < opts.relays; i++) {
      const relayId = `naive-${i}`
      const channel = yield* Effect.promise(() => model.createConfirmChannel())
      channel.on("error", () => undefined)
      const mailbox = yield* opts.hub.subscribe
      const loop = Effect.gen(function*() {
        while (true) {
          yield* mailbox.clear
          const claimed = yield* opts.store.claim({ relayId, batchSize: opts.batchSize, lease }).pipe(Effect.orDie)
          if (claimed.length === 0) {
            // A relay without wake-ups would poll; this one sleeps until a commit signals it.
            yield* Effect.raceFirst(mailbox.take, Effect.sleep("100 millis"))
            continue
          }
          for (const c of claimed) {
            const m = outgoing(c.message, opts.exchange)
            yield* Effect.promise(() => {
              channel.publish(m.exchange, m.routingKey, m.content, m.options)
              return channel.waitForConfirms()
            })
            opts.onConfirmed(c.message.id, performance.now())
          }
          yield* opts.store.settle(relayId, { published: claimed.map((c) => c.message.id), retry: [], failed: [] })
            .pipe(Effect.orDie)
        }
      })
      yield* Effect.forkScoped(loop)
    }
  })
