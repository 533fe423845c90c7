/**
 * The publish-and-settle pipeline shared by the pollers, the eager lane, suspect recovery and
 * `Relay.drain`: publish a claimed batch (one span per event, a publish timeout, per-key waves),
 * turn the results into a settlement (published, retried with a backoff, failed, or released when
 * the publisher was unavailable), and write it with {@link settle}, the one settle helper.
 * @internal
 */
import { Cause, Clock, Duration, Effect, Exit, Fiber, Metric, Option, Schedule, type Tracer } from "effect"
import * as Errors from "../../Errors.ts"
import { PublishError, type StoreError, Timeout, Unknown } from "../../Errors.ts"
import { HeaderNames, type Message, withHeaders } from "../../Message.ts"
import * as Metrics from "../../Metrics.ts"
import type { ClaimedEvent, OutboxStore, Settlement } from "../../OutboxStore.ts"
import type { Publisher, PublishResult } from "../../Publisher.ts"
import * as Retry from "../../Retry.ts"
import * as Tracing from "../../Tracing.ts"
import * as MessagingSpans from "../messagingSpans.ts"
import type { Settings } from "./settings.ts"

/** What one published batch came to. */
export interface Outcome {
  readonly settlement: Settlement
  /**
   * The publisher or its broker was unavailable for some events: they are in `released` (given
   * back, their attempt not counted) and the caller pauses before claiming again.
   */
  readonly unavailable: boolean
}

/** Restores interruptibility inside an `uninterruptibleMask`. */
export type Restore = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

const publishFailed = (message: string, retryable = true, cause?: unknown) =>
  new PublishError({ message, reason: new Unknown({ retryable }), ...(cause === undefined ? {} : { cause }) })

/**
 * Calls the publisher in a fiber of its own, awaited interruptibly: a publisher that does not
 * answer (or ignores interruption) cannot hold the relay past the publish timeout or the shutdown
 * deadline; a fiber left behind is interrupted in the background. Returns the publisher's exit.
 */
const callPublisher = (
  publisher: Publisher["Service"],
  messages: ReadonlyArray<Message>,
  timeout: Duration.Duration,
  parent: Tracer.AnySpan | undefined
) =>
  Effect.flatMap(
    Effect.forkDetach(
      parent === undefined ? publisher.publish(messages) : Effect.withParentSpan(publisher.publish(messages), parent),
      { startImmediately: true }
    ),
    (fiber) => {
      // A publisher that answered at once (an in-memory one) needs no timeout.
      const done = fiber.pollUnsafe()
      if (done !== undefined) return Effect.succeed(done)
      return Fiber.await(fiber).pipe(
        Effect.timeoutOrElse({
          duration: timeout,
          orElse: () =>
            Effect.succeed(
              Exit.fail(
                new PublishError({
                  message: `publish timed out after ${Duration.format(timeout)}`,
                  reason: new Timeout()
                })
              )
            )
        }),
        Effect.onExit(() => Effect.sync(() => fiber.pollUnsafe() === undefined ? fiber.interruptUnsafe() : undefined))
      )
    }
  )

/** The error of a failed publish: its typed error, else a retryable one describing a defect or an interruption. */
const batchError = (cause: Cause.Cause<PublishError>): PublishError =>
  Option.getOrElse(Cause.findErrorOption(cause), () => {
    const defect = Cause.findDefect(cause)
    return defect._tag === "Success"
      ? publishFailed(`publisher defect: ${Errors.describe(defect.success)}`, true, defect.success)
      : publishFailed(`publish ${Errors.describeCause(cause)}`)
  })

/** Publishes one batch; never fails but by interruption: every message gets a result. */
const publishBatch = (
  publisher: Publisher["Service"],
  claimed: ReadonlyArray<ClaimedEvent>,
  relayId: string,
  timeout: Duration.Duration
) =>
  Effect.gen(function*() {
    const traced = yield* MessagingSpans.spansObserved
    const send = MessagingSpans.sender(relayId, publisher.destination, claimed.length)
    const spans = traced ? yield* Effect.forEach(claimed, (c) => send(c.message)) : undefined
    // The published message carries its send span as its trace parent, so a consumer's span
    // continues append (create) → send → process as one trace.
    const messages = spans === undefined ?
      claimed.map((c) => c.message) :
      claimed.map((c, i): Message =>
        withHeaders(c.message, {
          ...c.message.headers,
          [HeaderNames.traceparent]: Tracing.formatTraceparent(spans[i]!)
        })
      )
    // A publisher's own span (a broker driver's) nests under the send span of a batch of one.
    const exit = yield* callPublisher(publisher, messages, timeout, spans?.length === 1 ? spans[0] : undefined).pipe(
      Effect.onInterrupt(() =>
        Effect.flatMap(
          Clock.currentTimeNanos,
          (end) => Effect.sync(() => spans?.forEach((s) => s.end(end, Exit.interrupt())))
        )
      )
    )
    const end = yield* Clock.currentTimeNanos
    const byId = new Map<string, PublishResult>()
    if (Exit.isSuccess(exit)) {
      for (const r of exit.value) {
        byId.set(r.id, r)
      }
    }
    const error = Exit.isFailure(exit) ? batchError(exit.cause) : undefined
    const results = messages.map((m): PublishResult =>
      byId.get(m.id) ??
        {
          _tag: "Rejected",
          id: m.id,
          error: error ?? publishFailed("the publisher returned no result for this message")
        }
    )
    spans?.forEach((span, i) =>
      span.end(end, results[i]!._tag === "Published" ? Exit.void : Exit.fail(results[i]!.error))
    )
    return results
  })

/**
 * Publishes a claimed batch. Unordered: all at once. Per-key: in waves, the i-th event of every key
 * in wave i, so that when an event fails, the later events of its key are not sent at all (they go
 * back unattempted, behind the failed one). Never fails except by interruption.
 */
const publishClaimed = (
  publisher: Publisher["Service"],
  claimed: ReadonlyArray<ClaimedEvent>,
  s: Settings,
  relayId: string
) =>
  Effect.gen(function*() {
    const results = new Map<string, PublishResult>()
    if (s.ordering !== "per-key") {
      const rs = yield* publishBatch(publisher, claimed, relayId, s.publishTimeout)
      rs.forEach((r) => results.set(r.id, r))
      return results
    }
    const byKey = new Map<string, Array<ClaimedEvent>>()
    for (const c of claimed) {
      const list = byKey.get(c.message.orderingKey)
      if (list === undefined) byKey.set(c.message.orderingKey, [c])
      else list.push(c)
    }
    let keys = [...byKey.keys()]
    for (let wave = 0; keys.length > 0; wave++) {
      const rs = yield* publishBatch(publisher, keys.map((k) => byKey.get(k)![wave]!), relayId, s.publishTimeout)
      rs.forEach((r) => results.set(r.id, r))
      keys = keys.filter((k, i) => rs[i]!._tag === "Published" && byKey.get(k)!.length > wave + 1)
    }
    return results
  })

const errorText = (error: PublishError): string => `${error.message}${error.isRetryable ? "" : " (not retryable)"}`

/**
 * Turns publish results into a settlement, using the retry schedule for the delays. An event the
 * publisher could not take because it (or its broker) was unavailable is released: its attempt is
 * not counted and no backoff grows, since the event did not fail.
 */
export const outcomeOf = (
  claimed: ReadonlyArray<ClaimedEvent>,
  results: ReadonlyMap<string, PublishResult>,
  s: Settings
) =>
  Effect.gen(function*() {
    const published: Array<string> = []
    const retry: Array<Settlement["retry"][number]> = []
    const failed: Array<Settlement["failed"][number]> = []
    const released: Array<string> = []
    let unavailable = false
    const now = yield* Clock.currentTimeMillis
    const context = yield* Effect.context<never>()
    for (const event of claimed) {
      const result = results.get(event.message.id)
      if (result === undefined) {
        released.push(event.message.id)
        continue
      }
      if (result._tag === "Published") {
        published.push(event.message.id)
        // Synchronously, in this loop: one effect per published event costs more than the update.
        Metrics.publishLatency.updateUnsafe(Math.max(0, now - event.message.occurredAt.getTime()) / 1000, context)
        continue
      }
      if (Errors.isUnavailable(result.error)) {
        unavailable = true
        released.push(event.message.id)
        continue
      }
      const error = errorText(result.error)
      if (!Errors.isRetryable(result.error)) {
        failed.push({ id: event.message.id, error })
      } else if (event.attempts >= s.maxAttempts) {
        failed.push({ id: event.message.id, error: `${error}; gave up after ${event.attempts} attempts` })
      } else {
        const delay = yield* Retry.delayFor(s.retry, event.attempts, undefined)
        if (Option.isNone(delay)) {
          failed.push({
            id: event.message.id,
            error: `${error}; retry schedule exhausted after ${event.attempts} attempts`
          })
        } // A refusal with Retry-After (HTTP 429/503) waits at least that long.
        else {retry.push({
            id: event.message.id,
            delay: Option.match(result.error.retryAfter, {
              onNone: () => delay.value,
              onSome: (after) => Duration.max(delay.value, after)
            }),
            error
          })}
      }
    }
    return { settlement: { published, retry, failed, released }, unavailable } satisfies Outcome
  })

const recordSettlement = (settlement: Settlement, relayId: string) =>
  Effect.gen(function*() {
    yield* Metric.update(Metrics.published, settlement.published.length)
    if (settlement.retry.length > 0) yield* Metric.update(Metrics.retried, settlement.retry.length)
    if (settlement.failed.length > 0) {
      yield* Metric.update(Metrics.failed, settlement.failed.length)
      yield* Effect.logWarning("outbox events failed for good").pipe(
        Effect.annotateLogs({ relayId, events: settlement.failed.map((f) => `${f.id}: ${f.error}`).join("; ") })
      )
    }
  })

/**
 * Publishes what a relay holds and returns the outcome (metrics recorded). On interruption, gives
 * the claims back under `holder` so that nothing waits for the lease. Must run inside
 * `uninterruptibleMask`, with its `restore`.
 */
export const publishHeld = (
  restore: Restore,
  store: OutboxStore["Service"],
  publisher: Publisher["Service"],
  held: ReadonlyArray<ClaimedEvent>,
  s: Settings,
  relayId: string,
  holder: string = relayId
): Effect.Effect<Outcome> =>
  Effect.gen(function*() {
    yield* Metric.update(Metrics.batchSize, held.length)
    const published = yield* Effect.exit(restore(publishClaimed(publisher, held, s, relayId)))
    if (Exit.isFailure(published)) {
      // Only interruption gets here (publishing turns failures into results).
      yield* store.release(holder, held.map((c) => c.message.id)).pipe(Effect.ignore({ log: true }))
      return yield* Effect.failCause(published.cause)
    }
    const outcome = yield* outcomeOf(held, published.value, s)
    yield* recordSettlement(outcome.settlement, relayId)
    return outcome
  })

// A settle that fails while the database is away is retried, backing off to one second, for up to
// the lease: it saves the events a trip through the lease and the crash-loop guard. A settle that
// lands after the lease is harmless (rows another relay took back are left alone). If it still
// fails, the events are published again by whoever reclaims them (at-least-once, never lost).
const settleBackoff = Schedule.min([Schedule.exponential(Duration.millis(50)), Schedule.spaced(Duration.seconds(1))])
// Built once per settings: a schedule built per settle (parsing its durations) cost a tenth of the
// relay's CPU per batch at batch size 1.
const settleRetries = new WeakMap<Settings, Schedule.Schedule<unknown, unknown>>()
const settleRetry = (s: Settings): Schedule.Schedule<unknown, unknown> => {
  let schedule = settleRetries.get(s)
  if (schedule === undefined) {
    schedule = settleBackoff.pipe(Schedule.upTo({ duration: s.lease }))
    settleRetries.set(s, schedule)
  }
  return schedule
}

/**
 * The one way the relay writes `settlement`: `write` (a settle, or a settle-and-claim) retried
 * while its failure is transient, in a `settle outbox` span.
 */
export const settle = <A>(
  s: Settings,
  relayId: string,
  settlement: Settlement,
  write: Effect.Effect<A, StoreError>
): Effect.Effect<A, StoreError> =>
  write.pipe(
    Effect.retry({ schedule: settleRetry(s), while: Errors.isRetryable }),
    MessagingSpans.settle(relayId, settlement)
  )

/** True when the settlement writes nothing. */
export const isEmpty = (settlement: Settlement): boolean =>
  settlement.published.length === 0 && settlement.retry.length === 0 && settlement.failed.length === 0 &&
  (settlement.released?.length ?? 0) === 0
