import { Cause, Clock, Duration, Effect, Exit, Option } from "effect"
import * as Errors from "../Errors.ts"
import { PublishError, Timeout, Unknown } from "../Errors.ts"
import type * as LogStore from "../LogStore.ts"
import { HeaderNames, type Message, withHeaders } from "../Message.ts"
import type { Publisher } from "../Publisher.ts"
import * as Tracing from "../Tracing.ts"
import type { Outcome } from "./logPlan.ts"

const spanOf = (message: Message, group: string, partition: number) => {
  const parent = Tracing.parseTraceparent(message.headers[HeaderNames.traceparent])
  return Effect.makeSpan("tidings.relay.publish", {
    kind: "producer",
    ...(parent !== undefined ? { parent } : {}),
    attributes: {
      "messaging.message.id": message.id,
      "tidings.event.type": message.type,
      "tidings.event.version": message.version,
      "tidings.log.group": group,
      "tidings.log.partition": partition
    },
    ...Tracing.noStack
  })
}

/**
 * Publishes one wave (events of several partitions) in one call, each under its own publish span
 * whose context the published message carries as its trace parent. Returns, per event, `undefined`
 * when published or the error; fails only by interruption.
 */
const publishWave = (publisher: Publisher["Service"], events: ReadonlyArray<LogStore.LogEvent>, group: string, timeout: Duration.Duration) =>
  Effect.gen(function*() {
    const spans = yield* Effect.forEach(events, (e) => spanOf(e.message, group, e.partition))
    const messages = events.map((e, i) =>
      withHeaders(e.message, { ...e.message.headers, [HeaderNames.traceparent]: Tracing.formatTraceparent(spans[i]!) })
    )
    const exit = yield* publisher.publish(messages).pipe(
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () => Effect.fail(new PublishError({ message: `publish timed out after ${Duration.format(timeout)}`, reason: new Timeout() }))
      }),
      Effect.catchDefect((defect) =>
        Effect.fail(new PublishError({ message: `publisher defect: ${String(defect)}`, reason: new Unknown({ retryable: true }), cause: defect }))
      ),
      Effect.exit
    )
    const end = yield* Clock.currentTimeNanos
    if (Exit.isFailure(exit) && Cause.hasInterrupts(exit.cause)) {
      spans.forEach((span) => span.end(end, exit))
      return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
    }
    const byId = new Map<string, PublishError | undefined>()
    if (Exit.isSuccess(exit)) for (const r of exit.value) byId.set(r.id, r._tag === "Published" ? undefined : r.error)
    const batchError = Exit.isFailure(exit)
      ? Option.getOrElse(Cause.findErrorOption(exit.cause), () => new PublishError({ message: Errors.describeCause(exit.cause), reason: new Unknown({ retryable: true }) }))
      : undefined
    return messages.map((m, i) => {
      const error = byId.has(m.id)
        ? byId.get(m.id)
        : batchError ?? new PublishError({ message: "the publisher returned no result for this message", reason: new Unknown({ retryable: true }) })
      spans[i]!.end(end, error === undefined ? Exit.void : Exit.fail(error))
      return error
    })
  })

/**
 * Publishes the batches of several partitions, each in order: in waves of up to `perPartition`
 * events of every partition, so that when an event fails, the later events of its partition are not
 * sent at all (they wait behind it). Returns each partition's outcome, in the order given.
 */
export const publishInOrder = (
  publisher: Publisher["Service"],
  batches: ReadonlyArray<ReadonlyArray<LogStore.LogEvent>>,
  options: { readonly group: string; readonly perPartition: number; readonly timeout: Duration.Duration; readonly kindOf: (e: unknown) => "unavailable" | "retry" | "fail" }
): Effect.Effect<ReadonlyArray<Outcome>> =>
  Effect.gen(function*() {
    const outcomes: Array<Outcome> = batches.map(() => ({ _tag: "Done" }))
    let active = batches.map((_, i) => i).filter((i) => batches[i]!.length > 0)
    for (let offset = 0; active.length > 0; offset += options.perPartition) {
      const wave: Array<LogStore.LogEvent> = []
      const owners: Array<{ readonly batch: number; readonly index: number }> = []
      for (const b of active) {
        const events = batches[b]!
        for (let i = offset; i < Math.min(events.length, offset + options.perPartition); i++) {
          wave.push(events[i]!)
          owners.push({ batch: b, index: i })
        }
      }
      const errors = yield* publishWave(publisher, wave, options.group, options.timeout)
      const stopped = new Set<number>()
      errors.forEach((error, k) => {
        const { batch, index } = owners[k]!
        if (error === undefined || stopped.has(batch)) return
        stopped.add(batch)
        outcomes[batch] = { _tag: "Stopped", index, error, kind: options.kindOf(error) }
      })
      active = active.filter((b) => !stopped.has(b) && batches[b]!.length > offset + options.perPartition)
    }
    return outcomes
  })
