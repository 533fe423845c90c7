import { Cause, Clock, Context, Duration, Effect, Exit, Option, type Tracer } from "effect"
import * as Errors from "../Errors.ts"
import { PublishError, Timeout, Unknown } from "../Errors.ts"
import type * as LogStore from "../LogStore.ts"
import { HeaderNames, type Message } from "../Message.ts"
import type { Publisher } from "../Publisher.ts"
import * as Tracing from "../Tracing.ts"
import type { Outcome } from "./logPlan.ts"
import * as LogSpans from "./logSpans.ts"
import { spansObserved } from "./messagingSpans.ts"

/**
 * Opens the `send <destination>` span of each event (a child of its append's trace) and gives the message the
 * span's context as its `traceparent`, so that a consumer continues the trace. Spans are made with
 * the current tracer directly, in one loop: `Effect.makeSpan` per event was most of the relay's own
 * time per event. Messages read from a log store are the reader's own, so the header is set in
 * place instead of copying the message. With tracing disabled, or no tracing backend installed
 * (Effect's `nativeTracer`), the messages go as they are.
 */
const openSpans = (
  events: ReadonlyArray<LogStore.LogEvent>,
  group: string,
  destination: Tracing.Destination | undefined
) =>
  Effect.gen(function*() {
    if (!(yield* spansObserved)) return { spans: undefined, messages: events.map((e) => e.message) }
    const tracer = yield* Effect.tracer
    const start = yield* Clock.currentTimeNanos
    const annotations = Context.empty()
    const spans: Array<Tracer.Span> = []
    const name = Tracing.spanName(LogSpans.spanNames.send, destination?.name)
    const attributes = {
      ...Tracing.messagingAttributes({ type: "send", name: "send" }, destination),
      ...(events.length === 1 ? {} : { "messaging.batch.message_count": events.length })
    }
    const messages: Array<Message> = []
    for (const e of events) {
      const m = e.message
      const parent = Tracing.parseTraceparent(m.headers[HeaderNames.traceparent])
      const span = tracer.span({
        name,
        parent: parent === undefined ? Option.none() : Option.some(parent),
        annotations,
        // Linked to the append's span as well, as the conventions ask of a send created elsewhere.
        links: parent === undefined ? [] : [{ span: parent, attributes: { "messaging.operation.type": "create" } }],
        startTime: start,
        kind: "producer",
        root: false,
        sampled: parent?.sampled ?? true
      })
      for (const [k, v] of Object.entries(attributes)) span.attribute(k, v)
      span.attribute("messaging.message.id", m.id)
      span.attribute("tidings.event.type", m.type)
      span.attribute("tidings.event.version", m.version)
      span.attribute("tidings.log.group", group)
      span.attribute("tidings.log.partition", e.partition)
      ;(m as { headers: Message["headers"] }).headers = {
        ...m.headers,
        [HeaderNames.traceparent]: Tracing.formatTraceparent(span)
      }
      spans.push(span)
      messages.push(m)
    }
    return { spans, messages }
  })

/**
 * Publishes one wave (events of several partitions) in one call, each under its own publish span.
 * Returns, per event, `undefined` when published or the error; fails only by interruption.
 */
const publishWave = (
  publisher: Publisher["Service"],
  events: ReadonlyArray<LogStore.LogEvent>,
  group: string,
  timeout: Duration.Duration
) =>
  Effect.gen(function*() {
    const { messages, spans } = yield* openSpans(events, group, publisher.destination)
    const exit = yield* publisher.publish(messages).pipe(
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () =>
          Effect.fail(
            new PublishError({ message: `publish timed out after ${Duration.format(timeout)}`, reason: new Timeout() })
          )
      }),
      Effect.catchDefect((defect) =>
        Effect.fail(
          new PublishError({
            message: `publisher defect: ${String(defect)}`,
            reason: new Unknown({ retryable: true }),
            cause: defect
          })
        )
      ),
      Effect.exit
    )
    const end = yield* Clock.currentTimeNanos
    if (Exit.isFailure(exit) && Cause.hasInterrupts(exit.cause)) {
      spans?.forEach((span) => span.end(end, exit))
      return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
    }
    const batchError = Exit.isFailure(exit)
      ? Option.getOrElse(Cause.findErrorOption(exit.cause), () =>
        new PublishError({ message: Errors.describeCause(exit.cause), reason: new Unknown({ retryable: true }) }))
      : undefined
    const results = Exit.isSuccess(exit) ? exit.value : []
    // Publishers answer in order as a rule; look ids up only when they did not.
    const inOrder = results.length === messages.length && results.every((r, i) =>
      r.id === messages[i]!.id
    )
    const byId = inOrder ? undefined : new Map(results.map((r) => [r.id, r]))
    return messages.map((m, i) => {
      const r = inOrder ? results[i] : byId!.get(m.id)
      const error = r === undefined
        ? batchError ??
          new PublishError({
            message: "the publisher returned no result for this message",
            reason: new Unknown({ retryable: true })
          })
        : r._tag === "Published"
        ? undefined
        : r.error
      spans?.[i]!.end(end, error === undefined ? Exit.void : Exit.fail(error))
      return error
    })
  })

/**
 * Splits a partition's events, in order, into waves in which no ordering key appears twice: a wave
 * ends where an event's key already is in it. Concatenated, the waves are the partition's order.
 */
export const waves = (events: ReadonlyArray<LogStore.LogEvent>): Array<ReadonlyArray<LogStore.LogEvent>> => {
  const out: Array<Array<LogStore.LogEvent>> = []
  let wave: Array<LogStore.LogEvent> = []
  let keys = new Set<string>()
  for (const e of events) {
    if (keys.has(e.message.orderingKey)) {
      out.push(wave)
      wave = []
      keys = new Set()
    }
    wave.push(e)
    keys.add(e.message.orderingKey)
  }
  if (wave.length > 0) out.push(wave)
  return out
}

/**
 * Publishes the batches of several partitions, each in its order: wave by wave (see {@link waves}),
 * the i-th waves of all partitions in one call. Without failures the broker receives every
 * partition's events in log order. When an event fails, its partition stops after that wave: no
 * later event of its key has been sent (the next one is in a later wave), so per key the order holds
 * under failures too; events of other keys sent in the same wave are published again after it.
 * Returns each partition's outcome, in the order given.
 */
export const publishInOrder = (
  publisher: Publisher["Service"],
  batches: ReadonlyArray<ReadonlyArray<LogStore.LogEvent>>,
  options: {
    readonly group: string
    readonly timeout: Duration.Duration
    readonly kindOf: (e: unknown) => "unavailable" | "retry" | "fail"
  }
): Effect.Effect<ReadonlyArray<Outcome>> =>
  Effect.gen(function*() {
    const outcomes: Array<Outcome> = batches.map(() => ({ _tag: "Done" }))
    const planned = batches.map(waves)
    // Where each event sits in its partition's batch.
    const offsets = planned.map((ws) => {
      let at = 0
      return ws.map((w) => {
        const start = at
        at += w.length
        return start
      })
    })
    let active = batches.map((_, i) => i).filter((i) => planned[i]!.length > 0)
    for (let w = 0; active.length > 0; w++) {
      const wave: Array<LogStore.LogEvent> = []
      // Which batch, and where in it, each event of the wave comes from (parallel arrays: no object per event).
      const batchOf: Array<number> = []
      const indexOf: Array<number> = []
      for (const b of active) {
        const events = planned[b]![w]!
        const start = offsets[b]![w]!
        for (let i = 0; i < events.length; i++) {
          wave.push(events[i]!)
          batchOf.push(b)
          indexOf.push(start + i)
        }
      }
      const errors = yield* publishWave(publisher, wave, options.group, options.timeout)
      const stopped = new Set<number>()
      for (let k = 0; k < errors.length; k++) {
        const error = errors[k]
        const batch = batchOf[k]!
        if (error === undefined || stopped.has(batch)) continue
        stopped.add(batch)
        outcomes[batch] = { _tag: "Stopped", index: indexOf[k]!, error, kind: options.kindOf(error) }
      }
      active = active.filter((b) => !stopped.has(b) && planned[b]!.length > w + 1)
    }
    return outcomes
  })
