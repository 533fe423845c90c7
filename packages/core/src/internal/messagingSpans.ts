/**
 * The spans of the outbox and the relay, after the OpenTelemetry messaging conventions:
 *
 * - `create <event type>` (producer): the append, in the app's transaction; its context is recorded
 *   in the message's `traceparent`.
 * - `receive outbox` (client): a claim that took events (an empty claim records no span, and runs
 *   untraced: an idle relay emits nothing).
 * - `send <destination>` (producer): one per event published, a child of its `create` span (so that
 *   a trace goes request → append → send → process) and linked to it, as the conventions ask of a
 *   send whose message was created elsewhere; the published message carries it as `traceparent`.
 * - `settle outbox` (client): the statement that marks a batch published, rescheduled or failed.
 * @internal
 */
import { Clock, Effect, Exit, References, Tracer } from "effect"
import type { Message } from "../Message.ts"
import type { Settlement } from "../OutboxStore.ts"
import * as Tracing from "../Tracing.ts"

/** `messaging.system` of the outbox table. */
export const outboxSystem = "tidings-outbox"

const outbox: Tracing.Destination = { system: outboxSystem, name: "outbox" }

/** The span names (`send` and `create` are followed by the destination). */
export const spanNames = {
  create: "create",
  claim: Tracing.spanName("receive", "outbox"),
  send: "send",
  settle: Tracing.spanName("settle", "outbox")
} as const

/** A clock whose "now" is `start`, for a span recorded after the work it covers. */
const startedAt = (clock: Clock.Clock, start: bigint): Clock.Clock => ({
  currentTimeMillisUnsafe: () => clock.currentTimeMillisUnsafe(),
  currentTimeMillis: clock.currentTimeMillis,
  currentTimeNanosUnsafe: () => start,
  currentTimeNanos: Effect.succeed(start),
  monotonicTimeNanosUnsafe: () => clock.monotonicTimeNanosUnsafe(),
  monotonicTimeNanos: clock.monotonicTimeNanos,
  sleep: (duration) => clock.sleep(duration)
})

/**
 * Runs `effect` untraced (nor do the statements it runs open spans), then records one span covering
 * it only when `worth` says the run did something (or failed): polls that find nothing emit nothing.
 */
export const spanWhen = <A, E>(
  name: string,
  options: (exit: Exit.Exit<A, E>) => Tracer.SpanOptionsNoTrace,
  worth: (exit: Exit.Exit<A, E>) => boolean
) =>
<R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.clockWith((clock) =>
    Effect.gen(function*() {
      const start = clock.currentTimeNanosUnsafe()
      const exit = yield* Effect.exit(Effect.withTracerEnabled(effect, false))
      if (worth(exit)) {
        const span = yield* Effect.makeSpan(name, options(exit)).pipe(
          Effect.provideService(Clock.Clock, startedAt(clock, start))
        )
        span.end(clock.currentTimeNanosUnsafe(), exit)
      }
      return yield* exit
    })
  )

const batch = (n: number): Record<string, number> => n === 1 ? {} : { "messaging.batch.message_count": n }

/** Around a claim: a `receive outbox` span when it took events or failed, nothing when it found none. */
export const claim =
  (relayId: string, batchSize: number) =>
  <A, E, R>(effect: Effect.Effect<ReadonlyArray<A>, E, R>): Effect.Effect<ReadonlyArray<A>, E, R> =>
    spanWhen<ReadonlyArray<A>, E>(
      spanNames.claim,
      (exit) => ({
        kind: "client",
        attributes: {
          ...Tracing.messagingAttributes({ type: "receive", name: "claim" }, outbox),
          ...(Exit.isSuccess(exit) ? { "messaging.batch.message_count": exit.value.length } : {}),
          "tidings.relay.id": relayId,
          "tidings.batch.size": batchSize
        }
      }),
      (exit) => Exit.isFailure(exit) || exit.value.length > 0
    )(effect)

/** The events a settlement settles. */
const settled = (s: Settlement): number =>
  s.published.length + s.retry.length + s.failed.length + (s.released?.length ?? 0)

/** Around a settle (or settle-and-claim) of `settlement`: a `settle outbox` span. */
export const settle =
  (relayId: string, settlement: Settlement) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.withSpan(effect, spanNames.settle, {
      ...Tracing.noStack,
      kind: "client",
      attributes: {
        ...Tracing.messagingAttributes({ type: "settle", name: "settle" }, outbox),
        ...batch(settled(settlement)),
        "tidings.relay.id": relayId
      }
    })

/**
 * Whether per-event spans can be seen: tracing is on and a tracing backend is installed. Effect's
 * own `nativeTracer` exports nothing (Effect documents comparing against it for this), so spans made
 * with it are garbage only: the relays then skip their per-event `send` spans, a fifth of the log
 * relay's time per event, and messages keep their append's traceparent, which a consumer joins.
 */
export const spansObserved: Effect.Effect<boolean> = Effect.map(
  Effect.all([Effect.tracer, References.TracerEnabled]),
  ([tracer, enabled]) => enabled && tracer !== Tracer.nativeTracer
)

const createLink = { "messaging.operation.type": "create" } as const

/**
 * The `send <destination>` spans of a batch: `sender(...)(message)` starts the span of one event,
 * a child of the event's `create` span (from its `traceparent`) and linked to it. The name and the
 * attributes every event of the batch shares are built once per batch, not once per event.
 */
export const sender = (relayId: string, destination: Tracing.Destination | undefined, batchSize: number) => {
  const name = Tracing.spanName(spanNames.send, destination?.name)
  const shared = {
    ...Tracing.messagingAttributes({ type: "send", name: "send" }, destination),
    ...batch(batchSize)
  }
  return (message: Message): Effect.Effect<Tracer.Span> => {
    const created = Tracing.parentFromHeaders(message.headers)
    return Effect.makeSpan(name, {
      kind: "producer",
      ...(created === undefined
        ? { root: true }
        : { parent: created, links: [{ span: created, attributes: createLink }] }),
      attributes: {
        ...shared,
        "messaging.message.id": message.id,
        "tidings.event.type": message.type,
        "tidings.event.version": message.version,
        "tidings.relay.id": relayId
      }
    })
  }
}

/** Around an append of `messages`: the `create <event type>` span (the type of the first, when all share it). */
export const create =
  (types: ReadonlyArray<string>) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
    const type = types.length > 0 && types.every((t) => t === types[0]) ? types[0] : undefined
    return Effect.withSpan(effect, Tracing.spanName(spanNames.create, type), {
      ...Tracing.noStack,
      kind: "producer",
      attributes: {
        ...Tracing.messagingAttributes({ type: "create", name: "append" }, { system: outboxSystem, name: type }),
        ...batch(types.length),
        "tidings.outbox.count": types.length
      }
    })
  }
