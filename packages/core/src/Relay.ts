/**
 * The relay: a two-phase poller that moves outbox events to a `Publisher`.
 *
 * 1. Claim a batch in a short transaction of the store (`FOR UPDATE SKIP LOCKED` on Postgres),
 *    setting a lease and counting the attempt.
 * 2. Publish outside any transaction; only a confirmed publish counts.
 * 3. Settle the batch in one statement: published, rescheduled with a backoff from a `Schedule`,
 *    or failed after the last attempt (the dead-letter state).
 *
 * Many relays run at once, in one process (`concurrency`) and across processes. A relay that dies
 * holding a lease leaves its events to be reclaimed once the lease expires.
 * @module
 */
import { Cause, Clock, Context, Deferred, Duration, Effect, Exit, Fiber, Layer, Metric, Option, Queue, Schedule, Semaphore, Tracer } from "effect"
import * as Errors from "./Errors.ts"
import { every } from "./internal/periodic.ts"
import { InvalidConfig, PublishError, type StoreError, Timeout, Unknown } from "./Errors.ts"
import * as ClaimCoalescer from "./internal/claimCoalescer.ts"
import * as DispatchLanes from "./internal/dispatchLanes.ts"
import * as Tracing from "./Tracing.ts"
import { HeaderNames, type Message, withHeaders } from "./Message.ts"
import * as Metrics from "./Metrics.ts"
import { type ClaimedEvent, type ClaimOptions, type Ordering, OutboxStore, type Settlement } from "./OutboxStore.ts"
import { Publisher, type PublishResult } from "./Publisher.ts"
import * as Retry from "./Retry.ts"
import { type Mailbox, Wakeups } from "./Wakeup.ts"
import { noStack } from "./Tracing.ts"

/** Relay settings; every field has a default. */
export interface Config {
  /** Prefix of the relay ids written to `claimed_by` (default `relay`). */
  readonly name?: string
  /** Pollers in this process (default 1). */
  readonly concurrency?: number
  /**
   * Claim statements of this process's pollers that may run at once. Publishing stays
   * `concurrency`-wide. Every concurrent `SKIP LOCKED` claim steps over the rows the others hold
   * locked, so with large batches more claimers cost throughput; with small ones the rows in flight
   * are few and more claims in flight hide round trips. Many pollers help when publishing is slow
   * (a remote broker), not for claiming.
   * - With `coalesceClaims` (unordered default): enough statements for about 40 rows each, at least
   *   2 and at most 4 (or `200 / batchSize` for batches under 50).
   * - Otherwise: `concurrency`, at most 4 (or at most `200 / batchSize` for batches under 50).
   */
  readonly claimConcurrency?: number
  /**
   * Unordered relays with more than one poller (default true): pollers waiting for a claim
   * statement share the next one. It settles all their batches and claims a batch for each (at most
   * 500 rows), so the database sees `claimConcurrency` larger statements instead of one small
   * statement and one commit per poller, while every poller still publishes `batchSize` events at a
   * time. With small batches that is most of the database's cost (measured at batch 10, 8 pollers:
   * 21,400 against 15,800 events/s). The claims are written with one holder id per group
   * (`<name>-<random>-claims`). Per-key relays always claim per poller.
   */
  readonly coalesceClaims?: boolean
  /**
   * `unordered` (default, fastest) or `per-key`: the events of one ordering key are published
   * strictly in order (writing transaction, then append order) while keys go in parallel. Every
   * relay on one outbox table must use the same mode. Per-key only publishes events written by
   * transactions older than every running one, so a long-running transaction anywhere in the
   * database delays ordered publishing until it ends.
   */
  readonly ordering?: Ordering
  /**
   * `eager` (default): events appended in this process on the relay's own store are written
   * already claimed for it and published right after their commit, with no claim statement in
   * between; events from elsewhere, and the overflow when more than `concurrency × batchSize` are
   * in flight, are claimed as usual. `poll`: every event is claimed. Unordered relays only (per-key
   * order needs the claim's check that no earlier transaction of the key can still commit).
   */
  readonly dispatch?: "eager" | "poll"
  /**
   * Eager dispatch: events handed over and not yet published, at most (default `concurrency ×
   * batchSize`). Appends that would go past it are written pending; what a transaction with many
   * appends brings past it at its commit goes back to pending.
   */
  readonly eagerLimit?: number
  /**
   * Eager dispatch: producer flow control, off by default. With a duration, appends are always
   * written for the relay, and a producer whose commit leaves the relay full (`eagerLimit` events
   * in flight) waits (after its commit, inside `withTransaction`, at most this long) until there is
   * room again; the relay then holds up to twice `eagerLimit`, and what does not fit goes back to
   * pending for a claim. It bounds how far
   * publishing lags behind when producers outpace the broker, at the price of slowing them down to
   * its pace; without it, the excess waits in the table for a claim.
   */
  readonly backpressure?: Duration.Input | false
  /** Publish attempts that may start without finishing (the relay died) before an event is failed (default 3). */
  readonly maxCrashes?: number
  /** Events claimed per batch (default 100). */
  readonly batchSize?: number
  /** How long a claim holds before another relay may take the events (default 30 s). */
  readonly lease?: Duration.Input
  /**
   * Adaptive polling: after a full batch wait `min`, after a partial one `base`, and when idle back
   * off from `base` doubling to `max`. A wake-up ends any wait at once.
   */
  readonly pollInterval?: { readonly min?: Duration.Input; readonly base?: Duration.Input; readonly max?: Duration.Input }
  /** Delay before retry n (default: 1 s doubling to 5 min, jittered). */
  readonly retry?: Schedule.Schedule<unknown, unknown>
  /** Attempts after which an event is marked failed (default 10). */
  readonly maxAttempts?: number
  /** A publish that takes longer fails (retryably); must be shorter than the lease (default: half the lease, at most 30 s). */
  readonly publishTimeout?: Duration.Input
  /** How often expired leases are taken back (default a quarter of the lease). */
  readonly reclaimInterval?: Duration.Input
  /** Retention of published rows; `false` turns it off (default: delete after 7 days, checked every minute). */
  readonly retention?: false | {
    readonly olderThan?: Duration.Input
    readonly interval?: Duration.Input
    readonly batchSize?: number
  }
  /** How often the pending / failed gauges are refreshed; `false` turns it off (default 10 s). */
  readonly statsInterval?: Duration.Input | false
  /** How long shutdown waits for an in-flight batch before interrupting it and releasing its claims (default 10 s). */
  readonly shutdownTimeout?: Duration.Input
}

/** {@link Config} with defaults applied and validated. */
export interface Settings {
  readonly name: string
  readonly concurrency: number
  readonly claimConcurrency: number
  /** True only for unordered relays with more than one poller. */
  readonly coalesceClaims: boolean
  readonly ordering: Ordering
  /** `eager` only for unordered relays; `poll` otherwise. */
  readonly dispatch: "eager" | "poll"
  readonly eagerLimit: number
  readonly backpressure: Duration.Duration | false
  readonly maxCrashes: number
  readonly batchSize: number
  readonly lease: Duration.Duration
  readonly pollMin: Duration.Duration
  readonly pollBase: Duration.Duration
  readonly pollMax: Duration.Duration
  readonly retry: Schedule.Schedule<unknown, unknown>
  readonly maxAttempts: number
  readonly publishTimeout: Duration.Duration
  readonly reclaimInterval: Duration.Duration
  readonly retention: false | { readonly olderThan: Duration.Duration; readonly interval: Duration.Duration; readonly batchSize: number }
  readonly statsInterval: Duration.Duration | false
  readonly shutdownTimeout: Duration.Duration
}

const duration = (path: string, input: Duration.Input | undefined, fallback: Duration.Input, allowZero = false): Duration.Duration => {
  const d = Duration.fromInputUnsafe(input ?? fallback)
  if (!Duration.isFinite(d) || Duration.toMillis(d) < 0 || (!allowZero && Duration.toMillis(d) === 0)) {
    throw new InvalidConfig({ path, message: `must be a finite ${allowZero ? "non-negative" : "positive"} duration, got ${String(input)}` })
  }
  return d
}

const integer = (path: string, input: number | undefined, fallback: number, min: number, max: number): number => {
  const n = input ?? fallback
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new InvalidConfig({ path, message: `must be an integer from ${min} to ${max}, got ${String(input)}` })
  }
  return n
}

const ordering = (input: Ordering | undefined): Ordering => {
  if (input === undefined || input === "unordered" || input === "per-key") return input ?? "unordered"
  throw new InvalidConfig({ path: "ordering", message: `must be "unordered" or "per-key", got ${JSON.stringify(input)}` })
}

const dispatch = (input: "eager" | "poll" | undefined, order: Ordering): "eager" | "poll" => {
  if (input !== undefined && input !== "eager" && input !== "poll") {
    throw new InvalidConfig({ path: "dispatch", message: `must be "eager" or "poll", got ${JSON.stringify(input)}` })
  }
  return order === "per-key" ? "poll" : input ?? "eager"
}

// Claims in flight lock about claims × batch rows that every other claim steps over: keep that near
// 200 rows for small batches, and at 4 claims otherwise (measured on 2 cores: 16 pollers × 100 ran
// 26% faster with 4 claims than with 16; 8 pollers × 10 ran 7% faster with 8 than with 4).
const defaultClaimConcurrency = (concurrency: number, batchSize: number) =>
  Math.min(concurrency, Math.max(4, Math.floor(200 / batchSize)))

// Merged claims: statements of about 40 rows, and at least two in flight, so that the database
// works on one while the pollers of the other publish (one statement at a time ran 12% slower at
// batch 10 × 8 pollers than two of 40 rows; four of 20 rows, 12% slower too).
const coalescedClaimConcurrency = (concurrency: number, batchSize: number) =>
  Math.min(defaultClaimConcurrency(concurrency, batchSize), Math.max(2, Math.ceil(concurrency * batchSize / 40)))

// A single poller has nobody to share with: handing its claims to the claimer's fiber would only
// add a hop (8% slower at batch 10 and at batch 100, measured).
const coalesceClaims = (input: boolean | undefined, order: Ordering, concurrency: number): boolean => {
  if (input !== undefined && typeof input !== "boolean") {
    throw new InvalidConfig({ path: "coalesceClaims", message: `must be true or false, got ${JSON.stringify(input)}` })
  }
  return order === "unordered" && concurrency > 1 && (input ?? true)
}

/** Applies defaults and validates; invalid settings fail with `InvalidConfig`. */
export const settings = (config: Config = {}): Effect.Effect<Settings, InvalidConfig> =>
  Effect.try({
    try: (): Settings => {
      const name = config.name ?? "relay"
      if (!/^[\w.:-]{1,64}$/.test(name)) throw new InvalidConfig({ path: "name", message: "must be 1-64 characters of [A-Za-z0-9_.:-]" })
      const pollMin = duration("pollInterval.min", config.pollInterval?.min, 0, true)
      const pollBase = duration("pollInterval.base", config.pollInterval?.base, "100 millis")
      const pollMax = duration("pollInterval.max", config.pollInterval?.max, "2 seconds")
      if (Duration.isGreaterThan(pollMin, pollBase) || Duration.isGreaterThan(pollBase, pollMax)) {
        throw new InvalidConfig({ path: "pollInterval", message: "must satisfy min <= base <= max" })
      }
      const lease = duration("lease", config.lease, "30 seconds")
      const publishTimeout = config.publishTimeout === undefined
        ? Duration.millis(Math.min(30_000, Duration.toMillis(lease) / 2))
        : duration("publishTimeout", config.publishTimeout, "30 seconds")
      if (!Duration.isLessThan(publishTimeout, lease)) {
        throw new InvalidConfig({ path: "publishTimeout", message: "must be shorter than the lease, or another relay could reclaim events still being published" })
      }
      const retention = config.retention === false ? false : {
        olderThan: duration("retention.olderThan", config.retention?.olderThan, "7 days", true),
        interval: duration("retention.interval", config.retention?.interval, "1 minute"),
        batchSize: integer("retention.batchSize", config.retention?.batchSize, 1000, 1, 100_000)
      }
      const concurrency = integer("concurrency", config.concurrency, 1, 1, 256)
      const batchSize = integer("batchSize", config.batchSize, 100, 1, 10_000)
      const order = ordering(config.ordering)
      const coalesce = coalesceClaims(config.coalesceClaims, order, concurrency)
      return {
        name,
        concurrency,
        claimConcurrency: integer(
          "claimConcurrency",
          config.claimConcurrency,
          (coalesce ? coalescedClaimConcurrency : defaultClaimConcurrency)(concurrency, batchSize),
          1,
          256
        ),
        coalesceClaims: coalesce,
        ordering: order,
        dispatch: dispatch(config.dispatch, order),
        eagerLimit: integer("eagerLimit", config.eagerLimit, concurrency * batchSize, 1, 10_000_000),
        backpressure: config.backpressure === undefined || config.backpressure === false
          ? false
          : duration("backpressure", config.backpressure, "1 second"),
        maxCrashes: integer("maxCrashes", config.maxCrashes, 3, 1, 100),
        batchSize,
        lease,
        pollMin,
        pollBase,
        pollMax,
        retry: config.retry ?? Retry.exponentialBackoff(),
        maxAttempts: integer("maxAttempts", config.maxAttempts, 10, 1, 1000),
        publishTimeout,
        reclaimInterval: config.reclaimInterval === undefined
          ? Duration.max(Duration.millis(Math.floor(Duration.toMillis(lease) / 4)), Duration.millis(50))
          : duration("reclaimInterval", config.reclaimInterval, "1 second"),
        retention,
        statsInterval: config.statsInterval === false ? false : duration("statsInterval", config.statsInterval, "10 seconds"),
        shutdownTimeout: duration("shutdownTimeout", config.shutdownTimeout, "10 seconds", true)
      }
    },
    catch: (e) => e instanceof InvalidConfig ? e : new InvalidConfig({ path: "", message: String(e) })
  })

/** A running relay group. */
export interface Service {
  readonly settings: Settings
  /** Ids of this process's pollers. */
  readonly relayIds: ReadonlyArray<string>
  /** True while the pollers run (for readiness checks). */
  readonly isRunning: Effect.Effect<boolean>
  /** Wakes the pollers now. */
  readonly wake: Effect.Effect<void>
}

/** The relay service; present while its layer is alive. */
export class Relay extends Context.Service<Relay, Service>()("@tidings/core/Relay") {}


const errorText = (error: PublishError): string => `${error.message}${error.isRetryable ? "" : " (not retryable)"}`

const spanOf = (message: Message, relayId: string) => {
  const parent = Tracing.parseTraceparent(message.headers[HeaderNames.traceparent])
  return Effect.makeSpan("tidings.relay.publish", {
    kind: "producer",
    ...(parent !== undefined ? { parent } : {}),
    attributes: {
      "messaging.message.id": message.id,
      "tidings.event.type": message.type,
      "tidings.event.version": message.version,
      "tidings.relay.id": relayId
    }
  })
}

/** Publishes one claimed batch; never fails: every message gets a result. */
const publishBatch = (publisher: Publisher["Service"], claimed: ReadonlyArray<ClaimedEvent>, relayId: string, timeout: Duration.Duration) =>
  Effect.gen(function*() {
    const spans = yield* Effect.forEach(claimed, (c) => spanOf(c.message, relayId))
    // The published message carries the publish span as its trace parent, so a consumer's span
    // continues append → relay publish → consume as one trace.
    const messages = claimed.map((c, i): Message =>
      withHeaders(c.message, { ...c.message.headers, [HeaderNames.traceparent]: Tracing.formatTraceparent(spans[i]!) })
    )
    const exit = yield* publisher.publish(messages).pipe(
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () => Effect.fail(new PublishError({ message: `publish timed out after ${Duration.format(timeout)}`, reason: new Timeout() }))
      }),
      Effect.catchDefect((defect) => Effect.fail(new PublishError({ message: `publisher defect: ${String(defect)}`, reason: new Unknown({ retryable: true }), cause: defect }))),
      Effect.exit
    )
    const end = yield* Clock.currentTimeNanos
    const byId = new Map<string, PublishResult>()
    if (Exit.isSuccess(exit)) for (const r of exit.value) byId.set(r.id, r)
    const batchError = Exit.isFailure(exit)
      ? Option.getOrElse(Cause.findErrorOption(exit.cause), () => new PublishError({ message: Errors.describeCause(exit.cause), reason: new Unknown({ retryable: true }) }))
      : undefined
    const results = messages.map((m): PublishResult =>
      byId.get(m.id) ?? {
        _tag: "Rejected",
        id: m.id,
        error: batchError ?? new PublishError({ message: "the publisher returned no result for this message", reason: new Unknown({ retryable: true }) })
      }
    )
    if (Exit.isSuccess(exit) || !Cause.hasInterrupts(exit.cause)) {
      results.forEach((r, i) => spans[i]!.end(end, r._tag === "Published" ? Exit.void : Exit.fail(r.error)))
    } else {
      spans.forEach((s) => s.end(end, exit))
      return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
    }
    return results
  })

/**
 * Publishes a claimed batch. Unordered: all at once. Per-key: in waves, the i-th event of every key
 * in wave i, so that when an event fails, the later events of its key are not sent at all (they go
 * back unattempted, behind the failed one). Never fails except by interruption.
 */
const publishClaimed = (publisher: Publisher["Service"], claimed: ReadonlyArray<ClaimedEvent>, s: Settings, relayId: string) =>
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

/** Turns publish results into a settlement, using the retry schedule for the delays. */
const settlementOf = (claimed: ReadonlyArray<ClaimedEvent>, results: ReadonlyMap<string, PublishResult>, s: Settings) =>
  Effect.gen(function*() {
    const published: Array<string> = []
    const retry: Array<Settlement["retry"][number]> = []
    const failed: Array<Settlement["failed"][number]> = []
    const released: Array<string> = []
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
      const error = errorText(result.error)
      if (!result.error.isRetryable) {
        failed.push({ id: event.message.id, error })
      } else if (event.attempts >= s.maxAttempts) {
        failed.push({ id: event.message.id, error: `${error}; gave up after ${event.attempts} attempts` })
      } else {
        const delay = yield* Retry.delayFor(s.retry, event.attempts, undefined)
        if (Option.isNone(delay)) failed.push({ id: event.message.id, error: `${error}; retry schedule exhausted after ${event.attempts} attempts` })
        else retry.push({ id: event.message.id, delay: Option.match(result.error.retryAfter, { onNone: () => delay.value, onSome: (after) => Duration.max(delay.value, after) }), error })
      }
    }
    return { published, retry, failed, released } satisfies Settlement
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

// A settle that fails (database blip) is retried briefly; if it still fails, the lease expires and
// the events are published again by whoever reclaims them (at-least-once, never lost).
const settleRetry = Schedule.exponential("50 millis").pipe(Schedule.upTo({ times: 5 }))

const claimOptions = (s: Settings, relayId: string, afterKey: string | undefined): ClaimOptions => ({
  relayId,
  batchSize: s.batchSize,
  lease: s.lease,
  ordering: s.ordering,
  ...(afterKey === undefined ? {} : { afterKey })
})

/** A poller claiming on its own, at most `claimConcurrency` of the group's claims at once. */
const ownClaims = (s: Settings, store: OutboxStore["Service"], relayId: string, claims: Semaphore.Semaphore): ClaimCoalescer.Claimer => ({
  holder: relayId,
  claim: (afterKey) =>
    store.claim(claimOptions(s, relayId, afterKey)).pipe(
      // per-key walks the keys from after the last one it took; at the end, wrap around at once
      Effect.flatMap((got) => got.length === 0 && afterKey !== undefined ? store.claim(claimOptions(s, relayId, undefined)) : Effect.succeed(got)),
      claims.withPermits(1)
    ),
  settleAndClaim: (settlement, afterKey) => claims.withPermits(1)(store.settleAndClaim(relayId, settlement, claimOptions(s, relayId, afterKey)))
})

/**
 * Publishes what a relay holds; on interruption, gives the claims back so that nothing waits for
 * the lease. Must run inside `uninterruptibleMask`, with its `restore`.
 */
const publishHeld = (
  restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>,
  store: OutboxStore["Service"],
  publisher: Publisher["Service"],
  held: ReadonlyArray<ClaimedEvent>,
  s: Settings,
  relayId: string,
  holder: string = relayId
) =>
  Effect.gen(function*() {
    yield* Metric.update(Metrics.batchSize, held.length)
    const published = yield* Effect.exit(restore(publishClaimed(publisher, held, s, relayId)))
    if (Exit.isFailure(published)) {
      // Only interruption gets here (publishing turns failures into results).
      yield* store.release(holder, held.map((c) => c.message.id)).pipe(Effect.ignore({ log: true }))
      return yield* Effect.failCause(published.cause)
    }
    return yield* settlementOf(held, published.value, s)
  })

/**
 * Claims, publishes and settles one batch as `relayId` (two commits). Returns the number of events
 * claimed. The relay's own loop instead settles each batch in the statement that claims the next.
 */
export const processBatch = (s: Settings, relayId: string): Effect.Effect<number, StoreError, OutboxStore | Publisher> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const store = yield* OutboxStore
      const publisher = yield* Publisher
      const claimed = yield* store.claim(claimOptions(s, relayId, undefined)).pipe(
        Effect.withSpan("tidings.outbox.claim", { attributes: { "tidings.relay.id": relayId, "tidings.batch.size": s.batchSize } }, noStack)
      )
      if (claimed.length === 0) return 0
      const settlement = yield* publishHeld(restore, store, publisher, claimed, s, relayId)
      yield* store.settle(relayId, settlement).pipe(
        Effect.retry({ schedule: settleRetry, while: (e) => e.isRetryable }),
        Effect.withSpan("tidings.outbox.settle", { attributes: { "tidings.relay.id": relayId } }, noStack)
      )
      yield* recordSettlement(settlement, relayId)
      return claimed.length
    })
  )

/**
 * One poller: claim; then, while it holds events, publish them and settle them in the statement
 * that claims the next batch. It waits (adaptively, or until woken) only when it holds nothing, and
 * only the waits and the publish can be interrupted: a claim is never dropped on the floor.
 */
const pollerLoop = (s: Settings, relayId: string, stop: Deferred.Deferred<void>, mailbox: Mailbox, claimer: ClaimCoalescer.Claimer) =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const store = yield* OutboxStore
      const publisher = yield* Publisher
      const holder = claimer.holder
      let held: ReadonlyArray<ClaimedEvent> = []
      let afterKey: string | undefined
      let delay = s.pollBase
      let lastClaim = 0
      const waitForWork = Effect.gen(function*() {
        const woken = yield* restore(Effect.raceAll([
          Effect.as(Effect.sleep(delay), "poll" as const),
          mailbox.take,
          Effect.as(Deferred.await(stop), "stop" as const)
        ]))
        if (woken === "local" || woken === "notify") delay = s.pollBase
      })
      while (true) {
        if (held.length === 0) {
          if (yield* Deferred.isDone(stop)) return
          yield* mailbox.clear // signals so far are answered by this claim
          const claimed = yield* Effect.result(claimer.claim(afterKey).pipe(
            Effect.withSpan("tidings.outbox.claim", { attributes: { "tidings.relay.id": relayId, "tidings.batch.size": s.batchSize } }, noStack)
          ))
          if (claimed._tag === "Failure") {
            yield* Effect.logWarning("relay claim failed; backing off", claimed.failure).pipe(Effect.annotateLogs({ relayId }))
            delay = nextDelay(s, delay, "error")
          } else {
            held = claimed.success
            lastClaim = held.length
            delay = nextDelay(s, delay, held.length)
          }
          if (held.length === 0) {
            afterKey = undefined
            yield* waitForWork
            continue
          }
        }
        const settlement = yield* publishHeld(restore, store, publisher, held, s, relayId, holder)
        if (s.ordering === "per-key") afterKey = held[held.length - 1]!.message.orderingKey
        const stopping = yield* Deferred.isDone(stop)
        // The claim in the settle statement answers the signals of every commit so far; kept, they
        // would send this relay into one more (empty) claim right after it.
        if (!stopping) yield* mailbox.clear
        const next = yield* (stopping ? Effect.as(store.settle(holder, settlement), []) : claimer.settleAndClaim(settlement, afterKey)).pipe(
          Effect.retry({ schedule: settleRetry, while: (e) => e.isRetryable }),
          Effect.withSpan("tidings.outbox.settle", { attributes: { "tidings.relay.id": relayId } }, noStack),
          Effect.result
        )
        yield* recordSettlement(settlement, relayId)
        if (next._tag === "Failure") {
          // The settle is lost with the claims: the lease expires and the events go out again.
          yield* Effect.logWarning("relay settle failed; its events will be reclaimed after the lease", next.failure).pipe(Effect.annotateLogs({ relayId }))
          held = []
          delay = nextDelay(s, delay, "error")
          continue
        }
        held = next.success
        if (lastClaim >= s.batchSize && Duration.toMillis(s.pollMin) > 0) yield* restore(Effect.sleep(s.pollMin))
        lastClaim = held.length
        if (held.length === 0) {
          delay = nextDelay(s, delay, 0)
          // Unordered: the combined claim saw every due event, so wait (for signals that arrived
          // after it started). Per-key: the keys just settled were still in flight in
          // that claim's snapshot, so look once more.
          if (s.ordering !== "per-key") yield* waitForWork
        }
      }
    })
  )

/**
 * The eager-dispatch lane of a relay group: events appended in this process on its store arrive
 * here after their commit, already claimed as `relayId`. `concurrency` workers publish them in
 * batches of up to `batchSize`; one settler writes the outcomes, all that accumulated while the
 * previous settle ran in one statement, off the publishing path. Closing stops new hand-overs,
 * publishes what was handed over, then writes the last settlements.
 */
const eagerLane = (s: Settings, relayId: string, store: OutboxStore["Service"], publisher: Publisher["Service"]) =>
  Effect.gen(function*() {
    const wakeups = yield* Wakeups
    const events = yield* Queue.unbounded<ClaimedEvent, Cause.Done>()
    const settlements = yield* Queue.unbounded<Settlement, Cause.Done>()
    const limit = s.eagerLimit
    const backpressure = s.backpressure
    let open = true
    let inFlight = 0
    // Producers waiting for room (backpressure) wait on `room`, replaced each time it opens.
    let room = Deferred.makeUnsafe<void>()
    const released = (n: number) => {
      inFlight -= n
      if (inFlight < limit) {
        Deferred.doneUnsafe(room, Exit.void)
        room = Deferred.makeUnsafe<void>()
      }
    }
    const waitForRoom: Effect.Effect<void> = Effect.suspend(() => open && inFlight >= limit ? Effect.andThen(Deferred.await(room), waitForRoom) : Effect.void)
    // Events written claimed for the lane that it will not publish: back to pending (the attempt not
    // counted), and the pollers woken to claim them.
    const giveBack = (back: ReadonlyArray<ClaimedEvent>) =>
      store.release(relayId, back.map((e) => e.message.id)).pipe(
        Effect.retry({ schedule: settleRetry, while: (e) => e.isRetryable }),
        Effect.andThen(wakeups.signal("local")),
        Effect.ignore({ log: true })
      )
    const lane: DispatchLanes.Lane = {
      claim: { relayId, lease: s.lease },
      hasRoom: (n) => open && (backpressure !== false || inFlight + n <= limit),
      deliver: (delivered) =>
        Effect.suspend(() => {
          if (!open) return giveBack(delivered)
          // The room was checked per append, before the commit: a transaction with many appends can
          // bring more. What does not fit goes back to pending (a claim takes it), so the queue stays
          // bounded and nothing waits in memory long enough for its lease to run out. With
          // backpressure the producers wait from `limit` on, and the queue may hold twice as much,
          // so that the events of the transactions committing meanwhile are not turned back.
          const fits = Math.max(0, Math.min(delivered.length, (backpressure === false ? limit : 2 * limit) - inFlight))
          inFlight += fits
          Queue.offerAllUnsafe(events, fits === delivered.length ? delivered : delivered.slice(0, fits))
          const rest = fits === delivered.length ? Effect.void : giveBack(delivered.slice(fits))
          return backpressure === false ? rest : Effect.andThen(rest, Effect.timeoutOption(waitForRoom, backpressure))
        })
    }
    const worker = Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        while (true) {
          const batch = yield* restore(Queue.takeBetween(events, 1, s.batchSize))
          const settlement = yield* publishHeld(restore, store, publisher, batch, s, relayId)
          released(batch.length)
          yield* recordSettlement(settlement, relayId)
          Queue.offerUnsafe(settlements, settlement)
        }
      })
    ).pipe(Effect.catchIf(Cause.isDone, () => Effect.void))
    const settler = Effect.gen(function*() {
      while (true) {
        const merged = ClaimCoalescer.mergeSettlements(yield* Queue.takeAll(settlements))
        yield* store.settle(relayId, merged).pipe(
          Effect.retry({ schedule: settleRetry, while: (e) => e.isRetryable }),
          Effect.withSpan("tidings.outbox.settle", { attributes: { "tidings.relay.id": relayId } }, noStack),
          Effect.catch((e) => Effect.logWarning("relay settle failed; its events will be reclaimed after the lease", e).pipe(Effect.annotateLogs({ relayId })))
        )
      }
    }).pipe(Effect.catchIf(Cause.isDone, () => Effect.void))
    const workers = yield* Effect.forEach(Array.from({ length: s.concurrency }), () => Effect.forkScoped(worker))
    const settling = yield* Effect.forkScoped(settler)
    // No more hand-overs; producers waiting for room go on.
    const shut = Effect.sync(() => {
      open = false
      Deferred.doneUnsafe(room, Exit.void)
      DispatchLanes.unregister(store, lane)
    })
    // Also shut if the layer fails to start, so that no producer hands events to dead workers.
    yield* Effect.acquireRelease(Effect.sync(() => DispatchLanes.register(store, lane)), () => shut)
    return {
      /** Stops hand-overs; the workers finish what they hold. */
      close: Effect.andThen(shut, Queue.end(events)),
      workers,
      /** After the workers: writes the last settlements. */
      finish: Effect.andThen(Queue.end(settlements), Fiber.await(settling))
    }
  })

/** Takes back expired leases, then publishes suspects (events whose relay died) one at a time. */
const recoverCrashed = (s: Settings, relayId: string) =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const store = yield* OutboxStore
      const publisher = yield* Publisher
      const reclaimed = yield* store.reclaimExpired({ maxCrashes: s.maxCrashes })
      if (reclaimed.suspect + reclaimed.failed > 0) {
        yield* Metric.update(Metrics.reclaimed, reclaimed.suspect + reclaimed.failed)
        yield* Effect.logWarning(`took back ${reclaimed.suspect + reclaimed.failed} events whose relay stopped mid-publish`)
      }
      if (reclaimed.failed > 0) {
        yield* Metric.update(Metrics.failed, reclaimed.failed)
        yield* Effect.logError(`${reclaimed.failed} events failed for good: their publish crashed the relay ${s.maxCrashes} times`)
      }
      // Bounded per round; alone, so that a poison event crashes no batch but its own.
      for (let i = 0; i < 20; i++) {
        const suspect = yield* store.claimSuspect({ relayId, lease: s.lease })
        if (suspect === undefined) return
        const settlement = yield* publishHeld(restore, store, publisher, [suspect], s, relayId)
        yield* store.settle(relayId, settlement).pipe(Effect.retry({ schedule: settleRetry, while: (e) => e.isRetryable }))
        yield* recordSettlement(settlement, relayId)
      }
    })
  )

const min = (a: Duration.Duration, b: Duration.Duration) => Duration.isLessThan(a, b) ? a : b

/** Next poll delay from the last batch's size (adaptive polling). */
const nextDelay = (s: Settings, previous: Duration.Duration, claimed: number | "error"): Duration.Duration => {
  if (claimed === "error") return min(Duration.max(Duration.times(previous, 2), s.pollBase), s.pollMax)
  if (claimed >= s.batchSize) return s.pollMin
  if (claimed > 0) return s.pollBase
  return Duration.isLessThan(previous, s.pollBase) ? s.pollBase : min(Duration.times(previous, 2), s.pollMax)
}

const randomId = () => Math.random().toString(36).slice(2, 8)


/**
 * Starts the relay group: `concurrency` pollers plus the lease reclaimer, retention and stats loops.
 * Closing the layer shuts down gracefully: stop claiming, let in-flight batches finish within
 * `shutdownTimeout` (or interrupt them and release their claims), then stop.
 */
export const layer = (config: Config = {}): Layer.Layer<Relay, InvalidConfig, OutboxStore | Publisher> =>
  Layer.effect(Relay, Effect.gen(function*() {
    const s = yield* settings(config)
    const store = yield* OutboxStore
    const wakeups = yield* Wakeups
    const stop = yield* Deferred.make<void>()
    let running = 0
    const group = `${s.name}-${randomId()}`
    const relayIds = Array.from({ length: s.concurrency }, (_, i) => `${group}-${i}`)
    const claims = yield* Semaphore.make(s.claimConcurrency)
    // Unordered pollers share one claimer, which merges the claims that wait for a statement.
    const coalescer = s.coalesceClaims
      ? yield* ClaimCoalescer.make({
        store,
        holder: `${group}-claims`,
        batchSize: s.batchSize,
        lease: s.lease,
        statements: s.claimConcurrency,
        pollers: s.concurrency
      })
      : undefined

    const poller = (relayId: string) =>
      Effect.gen(function*() {
        const mailbox = yield* wakeups.subscribe
        running++
        yield* pollerLoop(s, relayId, stop, mailbox, coalescer ?? ownClaims(s, store, relayId, claims))
      }).pipe(Effect.scoped, Effect.ensuring(Effect.sync(() => running--)))

    const pollers = yield* Effect.forEach(relayIds, (id) => Effect.forkScoped(poller(id)))
    const lane = s.dispatch === "eager" ? yield* eagerLane(s, `${group}-eager`, store, yield* Publisher) : undefined

    yield* Effect.forkScoped(every(s.reclaimInterval, "lease reclaim", recoverCrashed(s, `${group}-recovery`)))
    if (s.retention !== false) {
      const r = s.retention
      // Bounded: at most 100 batches per round, so one round never runs unbounded.
      const round = Effect.gen(function*() {
        for (let i = 0; i < 100; i++) {
          const n = yield* store.prune({ olderThan: r.olderThan, limit: r.batchSize })
          if (n === undefined || n === 0) return
          yield* Metric.update(Metrics.pruned, n)
          if (n < r.batchSize) return
        }
      })
      yield* Effect.forkScoped(every(r.interval, "outbox retention", round))
    }
    if (s.statsInterval !== false) {
      yield* Effect.forkScoped(every(s.statsInterval, "outbox stats", Effect.gen(function*() {
        const stats = yield* store.stats
        yield* Metric.update(Metrics.outboxPending, stats.pending)
        yield* Metric.update(Metrics.outboxFailed, stats.failed)
        yield* Metric.update(Metrics.outboxOldestPendingAge, (stats.oldestPendingAgeMs ?? 0) / 1000)
      })))
    }

    // Runs before the scope interrupts the fibers forked above (finalizers run in reverse order).
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        if (lane !== undefined) yield* lane.close
        yield* Deferred.succeed(stop, undefined)
        const fibers = [...pollers, ...(lane?.workers ?? [])]
        const done = yield* Fiber.awaitAll(fibers).pipe(Effect.timeoutOption(s.shutdownTimeout))
        if (Option.isNone(done)) {
          yield* Effect.logWarning(`relay shutdown: in-flight batches did not finish within ${Duration.format(s.shutdownTimeout)}; releasing their claims`)
          yield* Fiber.interruptAll(fibers)
        }
        if (lane !== undefined) yield* lane.finish.pipe(Effect.timeoutOption(s.shutdownTimeout))
      })
    )

    return Relay.of({
      settings: s,
      relayIds,
      isRunning: Effect.sync(() => running > 0),
      wake: wakeups.signal("local")
    })
  }))

/** Used by tests and the admin API: the relay's own tracer-free span name list. */
export const spanNames = { claim: "tidings.outbox.claim", publish: "tidings.relay.publish", settle: "tidings.outbox.settle" } as const

// Re-exported for callers that build parents from headers (consumers do the same).
export const parentFromHeaders = (headers: Readonly<Record<string, string>>): Tracer.ExternalSpan | undefined =>
  Tracing.parseTraceparent(headers[HeaderNames.traceparent])
