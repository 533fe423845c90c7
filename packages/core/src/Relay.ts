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
 * holding a lease leaves its events to be reclaimed once the lease expires. While the publisher or
 * the database is unavailable the relay pauses: no attempt is counted and no backoff grows.
 * {@link layer} runs it for as long as the app lives; {@link drain} runs it once, bounded.
 * @since 0.1.0
 * @module
 */
import { Context, Deferred, Duration, Effect, Fiber, Layer, Metric, Semaphore } from "effect"
import * as EagerDispatch from "./EagerDispatch.ts"
import * as Errors from "./Errors.ts"
import type { InvalidConfig, StoreError } from "./Errors.ts"
import * as ClaimCoalescer from "./internal/claimCoalescer.ts"
import * as MessagingSpans from "./internal/messagingSpans.ts"
import { every } from "./internal/periodic.ts"
import * as EagerLane from "./internal/relay/eagerLane.ts"
import { config } from "./internal/relay/fromEnvironment.ts"
import { claimOptions, type Counters, ownClaims, pollerLoop } from "./internal/relay/poller.ts"
import { publishHeld, settle } from "./internal/relay/publish.ts"
import { recoverCrashed } from "./internal/relay/recovery.ts"
import { type Config, type Settings, settings } from "./internal/relay/settings.ts"
import * as Workers from "./internal/relay/workers.ts"
import * as Metrics from "./Metrics.ts"
import { OutboxStore } from "./OutboxStore.ts"
import { Publisher } from "./Publisher.ts"
import type * as Settings_ from "./Settings.ts"
import { Wakeups } from "./Wakeup.ts"

// Settings and the bounded run live in their own modules (documented there); they are part of
// this module's API.
export { drain, type DrainConfig, type DrainReport } from "./internal/relay/drain.ts"
export { config, environment } from "./internal/relay/fromEnvironment.ts"
export { type Config, ConfigSchema, type Settings, settings } from "./internal/relay/settings.ts"

/**
 * What a relay group's pollers are doing.
 * @since 0.1.0
 * @category models
 */
export interface Status {
  /** Pollers running. */
  readonly pollers: number
  /** Pollers waiting for work: their last claim found nothing due. */
  readonly idle: number
  /** Pollers waiting for the publisher to become available again. */
  readonly paused: number
  /** Claim statements the pollers made so far (claims, and settles that claim the next batch). */
  readonly claims: number
}

/**
 * A running relay group.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  readonly settings: Settings
  /** Ids of this process's pollers. */
  readonly relayIds: ReadonlyArray<string>
  /** True while the pollers run (for readiness checks). */
  readonly isRunning: Effect.Effect<boolean>
  /** What the pollers are doing now (for tests, admin views and readiness). */
  readonly status: Effect.Effect<Status>
  /** Wakes the pollers now. */
  readonly wake: Effect.Effect<void>
}

const RelayBase: Context.ServiceClass<Relay, "@tidings/core/Relay", Service> = Context.Service<Relay, Service>()(
  "@tidings/core/Relay"
)

/**
 * The relay service; present while its layer is alive.
 * @since 0.1.0
 * @category services
 */
export class Relay extends RelayBase {}

/**
 * Claims, publishes and settles one batch as `relayId` (two commits). Returns the number of events
 * claimed. The relay's own loop instead settles each batch in the statement that claims the next.
 * @since 0.1.0
 * @category constructors
 */
export const processBatch = (
  s: Settings,
  relayId: string
): Effect.Effect<number, StoreError, OutboxStore | Publisher> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const store = yield* OutboxStore
      const publisher = yield* Publisher
      const claimed = yield* store.claim(claimOptions(s, relayId, undefined)).pipe(
        MessagingSpans.claim(relayId, s.batchSize)
      )
      if (claimed.length === 0) return 0
      const outcome = yield* publishHeld(restore, store, publisher, claimed, s, relayId)
      yield* settle(s, relayId, outcome.settlement, store.settle(relayId, outcome.settlement))
      return claimed.length
    })
  )

const randomId = () => Math.random().toString(36).slice(2, 8)

// The end of the shutdown deadline: time to interrupt what still runs, release its claims and write
// the last settlements. Past it, whatever has not ended (a statement to a database that is gone) is
// left to end on its own, and the layer closes. It is taken from `shutdownTimeout`, not added to it:
// the layers closed after the relay (the database client, the broker connection) and the process's
// exit need the rest of the second an operator's `shutdownTimeout + 1 s` allows.
const shutdownGrace = Duration.millis(500)

/** How long in-flight batches get on shutdown: `shutdownTimeout` less the grace (never negative). */
const inFlightDeadline = (shutdownTimeout: Duration.Duration): Duration.Duration =>
  Duration.millis(Math.max(0, Duration.toMillis(shutdownTimeout) - Duration.toMillis(shutdownGrace)))

/**
 * A background round whose store is unavailable fails every time until it is back: say so once,
 * then quietly, and once more when it works again.
 */
const quietWhileUnavailable = <A, E, R>(
  label: string,
  round: Effect.Effect<A, E, R>
): Effect.Effect<A | void, E, R> => {
  let unavailable = false
  return round.pipe(
    Effect.tap(() => {
      if (!unavailable) return Effect.void
      unavailable = false
      return Effect.logInfo(`${label}: the store answers again`)
    }),
    Effect.catchIf(Errors.isUnavailable, (error) => {
      if (unavailable) return Effect.logDebug(`${label}: the store is still unavailable`, error)
      unavailable = true
      return Effect.logWarning(`${label}: the store is unavailable; retrying`, error)
    })
  )
}

/** The retention, stats and lease-recovery loops of a group. */
const background = (
  s: Settings,
  group: string,
  store: OutboxStore["Service"],
  publisher: Publisher["Service"],
  stop: Deferred.Deferred<void>,
  workers: Workers.Workers
) =>
  Effect.gen(function*() {
    yield* workers.fork(
      every(
        s.reclaimInterval,
        "lease reclaim",
        quietWhileUnavailable(
          "lease reclaim",
          recoverCrashed({ settings: s, relayId: `${group}-recovery`, store, publisher, stop })
        )
      ),
      "loop"
    )
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
      yield* workers.fork(
        every(r.interval, "outbox retention", quietWhileUnavailable("outbox retention", round)),
        "loop"
      )
    }
    if (s.statsInterval !== false) {
      yield* workers.fork(
        every(
          s.statsInterval,
          "outbox stats",
          quietWhileUnavailable(
            "outbox stats",
            Effect.gen(function*() {
              const stats = yield* store.stats
              yield* Metric.update(Metrics.outboxPending, stats.pending)
              yield* Metric.update(Metrics.outboxFailed, stats.failed)
              yield* Metric.update(Metrics.outboxOldestPendingAge, (stats.oldestPendingAgeMs ?? 0) / 1000)
            })
          )
        ),
        "loop"
      )
    }
  })

/**
 * Starts the relay group: `concurrency` pollers, the eager lane (when the store's `EagerDispatch`
 * registry is provided), and the lease recovery, retention and stats loops. No store or publisher
 * error ends it: it backs off and pauses instead. Closing the layer shuts down gracefully: stop
 * claiming, let in-flight batches finish within `shutdownTimeout` less half a second (or interrupt
 * them and release their claims in that half second), then stop; it takes at most `shutdownTimeout`
 * (half a second when that is shorter).
 * @since 0.1.0
 * @category layers
 */
export const layer = (config: Config = {}): Layer.Layer<Relay, InvalidConfig, OutboxStore | Publisher> =>
  Layer.effect(
    Relay,
    Effect.gen(function*() {
      const s = yield* settings(config)
      yield* Metrics.initializeRelay
      const store = yield* OutboxStore
      const publisher = yield* Publisher
      const wakeups = yield* Wakeups
      const registry = yield* EagerDispatch.Lanes
      const stop = yield* Deferred.make<void>()
      const workers = Workers.make()
      const counters: Counters = { running: 0, idle: 0, paused: 0, claims: 0 }
      const group = `${s.name}-${randomId()}`
      const relayIds = Array.from({ length: s.concurrency }, (_, i) => `${group}-${i}`)
      let pollers: ReadonlyArray<Fiber.Fiber<unknown, unknown>> = []
      let lane: EagerLane.EagerLane | undefined

      // Added before anything starts, so that it also runs when starting fails half way.
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          if (lane !== undefined) yield* lane.close
          yield* Deferred.succeed(stop, undefined)
          yield* Workers.interruptNow(workers.running("loop"))
          const inFlight = [...pollers, ...(lane?.workers ?? [])]
          const deadline = inFlightDeadline(s.shutdownTimeout)
          const finished = yield* Effect.raceFirst(
            Effect.as(Fiber.awaitAll(inFlight), true),
            Effect.as(Effect.sleep(deadline), false)
          )
          if (!finished) {
            yield* Effect.logWarning(
              `relay shutdown: in-flight batches did not finish within ${
                Duration.format(deadline)
              }; releasing their claims`
            )
            yield* Workers.interruptNow(inFlight)
          }
          const ended = yield* Effect.raceFirst(
            Effect.gen(function*() {
              // Interrupted publishes release their claims; then the lane writes its last settlements.
              yield* Fiber.awaitAll(inFlight)
              if (lane !== undefined) yield* lane.finish
              const rest = workers.running()
              yield* Workers.interruptNow(rest)
              yield* Fiber.awaitAll(rest)
              return true
            }),
            Effect.as(Effect.sleep(shutdownGrace), false)
          )
          if (!ended) {
            const left = workers.running()
            yield* Workers.interruptNow(left)
            yield* Effect.logWarning(
              `relay shutdown: ${left.length} fibers did not end in time (store or publisher not answering); left to end on their own`
            )
          }
        })
      )

      const claims = yield* Semaphore.make(s.claimConcurrency)
      // Unordered pollers share one claimer, which merges the claims that wait for a statement.
      const coalescer = s.coalesceClaims
        ? yield* ClaimCoalescer.make({
          store,
          holder: `${group}-claims`,
          batchSize: s.batchSize,
          lease: s.lease,
          statements: s.claimConcurrency,
          pollers: s.concurrency,
          fork: workers.fork
        })
        : undefined
      const poller = (relayId: string) =>
        Effect.gen(function*() {
          const mailbox = yield* wakeups.subscribe
          counters.running++
          yield* pollerLoop({
            settings: s,
            relayId,
            store,
            publisher,
            stop,
            mailbox,
            claimer: coalescer ?? ownClaims(s, store, relayId, claims),
            counters
          })
        }).pipe(Effect.scoped, Effect.ensuring(Effect.sync(() => void counters.running--)))
      pollers = yield* Effect.forEach(relayIds, (id) => workers.fork(poller(id)))
      if (s.dispatch === "eager" && registry.enabled) {
        lane = yield* EagerLane.make({
          settings: s,
          relayId: `${group}-eager`,
          store,
          publisher,
          registry,
          stop,
          workers
        })
      }
      yield* background(s, group, store, publisher, stop, workers)

      return Relay.of({
        settings: s,
        relayIds,
        isRunning: Effect.sync(() => counters.running > 0),
        status: Effect.sync(() => ({
          pollers: counters.running,
          idle: counters.idle,
          paused: counters.paused,
          claims: counters.claims
        })),
        wake: wakeups.signal("local")
      })
    })
  )

/**
 * {@link layer} with its options read from the environment ({@link config}: `TIDINGS_RELAY_*`, on
 * top of `options.defaults`); a wrong variable fails the layer with one `InvalidConfig` naming
 * every wrong variable.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Settings_.EnvironmentOptions<Config> = {}
): Layer.Layer<Relay, InvalidConfig, OutboxStore | Publisher> => Layer.unwrap(Effect.map(config(options), layer))
