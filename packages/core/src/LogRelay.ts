/**
 * The log relay: log mode's publisher. Instead of claiming and marking every event (two new row
 * versions each), the instances of a relay group split the log's partitions by lease and keep a
 * cursor per partition: a read takes every readable event after the cursor, they are published in
 * order, and one write per partition and batch moves the cursor.
 *
 * - **Order.** Events of a partition are published in order (writing transaction, then append
 *   order), partitions in parallel. A partition's batch goes out in waves in which no ordering key
 *   repeats, so that when an event fails, no later event of its key has been sent: it is retried
 *   first, and the events of other keys sent with it are published again after it.
 * - **Nothing skipped.** Reads stop before the oldest transaction still open: an event whose
 *   transaction commits late is published in its place. The price: a long transaction anywhere in
 *   the database holds the log back (`tidings_log_oldest_open_transaction_age_seconds` and
 *   {@link readiness} show it).
 * - **Failures.** A failed publish retries the partition's head with the `retry` schedule; after
 *   `maxAttempts` (or at once, for an error that is not retryable) the event moves to the failed
 *   table, the outbox's `failed` rows (same admin views, retry and discard), and the cursor moves on.
 *   A broker that is unavailable pauses the partition without counting an attempt.
 * - **Crash loops.** A partition taken over from an owner that died with a batch in flight has the
 *   batch's events published one at a time; an event whose publish killed its owner `maxCrashes`
 *   times is failed.
 * - **Leases.** Instances rebalance when members join, leave or die, within about one lease. A
 *   cursor write is fenced by the lease's epoch: an instance paused past its lease cannot move the
 *   cursor when it resumes; the new owner publishes its batch again (at least once, never skipped).
 * @since 0.1.0
 * @module
 */
import { Clock, Context, Duration, Effect, Layer, Metric, Schedule, Schema } from "effect"
import * as Errors from "./Errors.ts"
import type { InvalidConfig } from "./Errors.ts"
import * as Health from "./Health.ts"
import * as LogGroup from "./internal/logGroup.ts"
import { kindOf, plan } from "./internal/logPlan.ts"
import { publishInOrder } from "./internal/logPublish.ts"
import { checkPoll, type GroupFields, groupFields, GroupName, memberId } from "./internal/logSettings.ts"
import * as LogSpans from "./internal/logSpans.ts"
import { every } from "./internal/periodic.ts"
import { LogStore } from "./LogStore.ts"
import * as Metrics from "./Metrics.ts"
import { Publisher } from "./Publisher.ts"
import * as Retry from "./Retry.ts"
import * as Decode from "./Settings.ts"
import { Wakeups } from "./Wakeup.ts"

/**
 * The relay's settings and their defaults (everything but `retry`), decoded by `Settings.decode`.
 * @since 0.1.0
 * @category config
 */
export const ConfigSchema: Schema.Struct<
  GroupFields & {
    readonly group: Decode.Defaulted<Schema.String>
    readonly batchSize: Decode.Defaulted<Decode.IntSetting>
    readonly publishTimeout: Schema.optional<Decode.DurationSetting>
    readonly retention: Decode.Defaulted<
      Schema.Union<
        readonly [
          Schema.Literal<false>,
          Schema.Struct<{
            readonly olderThan: Decode.Defaulted<Decode.DurationSetting>
            readonly interval: Decode.Defaulted<Decode.DurationSetting>
            readonly batchSize: Decode.Defaulted<Decode.IntSetting>
          }>
        ]
      >
    >
    readonly statsInterval: Decode.Defaulted<Schema.Union<readonly [Schema.Literal<false>, Decode.DurationSetting]>>
  }
> = Schema.Struct({
  /** The relay group: its instances share the partitions; another group reads the same log independently. */
  group: GroupName.pipe(Schema.withDecodingDefault(Effect.succeed("relay"))),
  ...groupFields,
  /** Events read per partition and batch. */
  batchSize: Decode.int(1, 10_000).pipe(Schema.withDecodingDefault(Effect.succeed(500))),
  /** A slower publish fails (retryably); default half the lease, at most 30 s. */
  publishTimeout: Schema.optional(Decode.duration()),
  /** Deleting events every group has passed; `false` turns it off. */
  retention: Schema.Union([
    Schema.Literal(false),
    Schema.Struct({
      /** Keep passed events at least this long (default 0: as soon as every group passed them). */
      olderThan: Decode.duration({ allowZero: true }).pipe(
        Schema.withDecodingDefault(Effect.succeed<Duration.Input>(0))
      ),
      interval: Decode.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("10 seconds"))),
      batchSize: Decode.int(1, 1_000_000).pipe(Schema.withDecodingDefault(Effect.succeed(10_000)))
    })
  ]).pipe(Schema.withDecodingDefault(Effect.succeed({}))),
  /** How often the oldest open transaction's age is sampled; `false` turns it off. */
  statsInterval: Schema.Union([Schema.Literal(false), Decode.duration()]).pipe(
    Schema.withDecodingDefault(Effect.succeed<Duration.Input | false>("10 seconds"))
  )
})

/**
 * Relay settings as written (durations as `"30 seconds"`, milliseconds or a `Duration`), plus the
 * retry schedule (default: 1 s doubling to 5 min, jittered).
 * @since 0.1.0
 * @category config
 */
export type Config = typeof ConfigSchema.Encoded & { readonly retry?: Schedule.Schedule<unknown, unknown> }

/**
 * Decoded settings.
 * @since 0.1.0
 * @category config
 */
export type Settings = Omit<typeof ConfigSchema.Type, "publishTimeout"> & {
  readonly publishTimeout: Duration.Duration
  readonly retry: Schedule.Schedule<unknown, unknown>
}

/**
 * Applies defaults and validates; every wrong setting is named in one `InvalidConfig`.
 * @since 0.1.0
 * @category config
 */
export const settings = ({ retry, ...config }: Config = {}): Effect.Effect<Settings, InvalidConfig> =>
  Effect.gen(function*() {
    const s = yield* Decode.decode(ConfigSchema, config)
    const publishTimeout = s.publishTimeout ?? Duration.millis(Math.min(30_000, Duration.toMillis(s.lease) / 2))
    const poll = checkPoll(s.pollInterval)
    if (poll !== undefined) return yield* poll
    if (!Duration.isLessThan(publishTimeout, s.lease)) {
      return yield* Decode.invalid([{
        path: "publishTimeout",
        message: "must be shorter than the lease, or another instance could take over a batch still being published"
      }])
    }
    return { ...s, publishTimeout, retry: retry ?? Retry.exponentialBackoff() }
  })

/**
 * The log relay's variables: `TIDINGS_LOG_RELAY_GROUP`, `TIDINGS_LOG_RELAY_CONCURRENCY`,
 * `TIDINGS_LOG_RELAY_LEASE`, `TIDINGS_LOG_RELAY_RETENTION=false`, ... (the options of
 * {@link ConfigSchema}).
 * @since 0.1.0
 * @category config
 */
export const environment: Decode.Environment<typeof ConfigSchema> = {
  component: "LogRelay",
  schema: ConfigSchema,
  prefix: "TIDINGS_LOG_RELAY"
}

/**
 * The relay's options from the environment (`TIDINGS_LOG_RELAY_*`, or `options.prefix`), on top of
 * `options.defaults` (which also carries what has no variable, such as `retry`), checked by the same
 * rules as object config; every problem is named by its variable.
 * @since 0.1.0
 * @category config
 */
export const config = (options: Decode.EnvironmentOptions<Config> = {}): Effect.Effect<Config, InvalidConfig> =>
  Effect.gen(function*() {
    const read: Config = yield* Decode.read(environment, options)
    yield* Effect.mapError(settings(read), Decode.inEnvironment(ConfigSchema, options.prefix ?? environment.prefix))
    return read
  })

/**
 * A running log relay instance.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  readonly settings: Settings
  /** This instance's member id in its group. */
  readonly member: string
  /** True while its workers run. */
  readonly isRunning: Effect.Effect<boolean>
  /**
   * True while an outage holds it back: a batch stopped because the publisher or the database was
   * unavailable, and none has been published since (no attempts are counted meanwhile).
   */
  readonly isPaused: Effect.Effect<boolean>
  /** The partitions it holds right now. */
  readonly partitions: Effect.Effect<ReadonlyArray<number>>
  /** Wakes its workers now. */
  readonly wake: Effect.Effect<void>
}

const LogRelayBase: Context.ServiceClass<LogRelay, "@tidings/core/LogRelay", Service> = Context.Service<
  LogRelay,
  Service
>()("@tidings/core/LogRelay")

/**
 * The log relay service; present while its layer is alive.
 * @since 0.1.0
 * @category services
 */
export class LogRelay extends LogRelayBase {}

// A settle that fails (database blip) is retried briefly; if it still fails, the batch is read and
// published again (at least once, never lost).
const settleRetry = Schedule.exponential("50 millis").pipe(Schedule.upTo({ times: 5 }))

/**
 * Starts a relay instance of its group: a lease loop and `concurrency` workers publishing the
 * partitions it holds, plus retention and the open-transaction gauge. Closing the layer finishes
 * the batches in flight (within `shutdownTimeout`), releases the leases and leaves the group.
 * @since 0.1.0
 * @category layers
 */
export const layer = (config: Config = {}): Layer.Layer<LogRelay, InvalidConfig, LogStore | Publisher> =>
  Layer.effect(
    LogRelay,
    Effect.gen(function*() {
      const s = yield* settings(config)
      const store = yield* LogStore
      const publisher = yield* Publisher
      const wakeups = yield* Wakeups
      const member = memberId(s.group)
      const processor: LogGroup.Processor = (restore, batches) =>
        Effect.gen(function*() {
          const outcomes = yield* restore(publishInOrder(publisher, batches.map((b) => b.events), {
            group: s.group,
            timeout: s.publishTimeout,
            kindOf
          }))
          const plans = yield* Effect.forEach(batches, (b, i) => plan(s, b.held, b.events, outcomes[i]!))
          const states = yield* store.settle(s.group, member, plans.map((p) => p.settlement)).pipe(
            Effect.retry({ schedule: settleRetry, while: (e) => e.isRetryable && !e.isUnavailable }),
            LogSpans.settle(s.group, batches.reduce((n, b) => n + b.events.length, 0))
          )
          const now = yield* Clock.currentTimeMillis
          const context = yield* Effect.context<never>()
          let published = 0
          let retried = 0
          let failed = 0
          plans.forEach((p, i) => {
            published += p.done
            retried += p.retried
            failed += p.failed
            const events = batches[i]!.events
            for (let k = 0; k < p.done; k++) {
              Metrics.publishLatency.updateUnsafe(
                Math.max(0, now - events[k]!.message.occurredAt.getTime()) / 1000,
                context
              )
            }
          })
          yield* Metric.update(Metrics.published, published)
          if (retried > 0) yield* Metric.update(Metrics.retried, retried)
          if (failed > 0) {
            yield* Metric.update(Metrics.failed, failed)
            yield* Effect.logWarning("log events failed for good").pipe(Effect.annotateLogs({
              group: s.group,
              events: plans.flatMap((p) => (p.settlement.failed ?? []).map((f) => `${f.event.message.id}: ${f.error}`))
                .join("; ")
            }))
          }
          return { plans, states }
        })
      const group: LogGroup.GroupSettings = {
        ...s,
        member,
        margin: Duration.min(s.publishTimeout, Duration.millis(Duration.toMillis(s.lease) / 4)),
        pollMin: s.pollInterval.min,
        pollBase: s.pollInterval.base,
        pollMax: s.pollInterval.max
      }
      yield* Metrics.initializeLog(s.group, "relay")
      const running = yield* LogGroup.run(group, processor, publisher.awaitAvailable ?? Effect.void)

      if (s.retention !== false) {
        const r = s.retention
        // Bounded: at most 100 batches per round.
        const round = Effect.gen(function*() {
          for (let i = 0; i < 100; i++) {
            const n = yield* store.prune({ olderThan: r.olderThan, limit: r.batchSize })
            if (n === undefined || n === 0) return
            yield* Metric.update(Metrics.log.pruned, n)
            if (n < r.batchSize) return
          }
        })
        yield* Effect.forkScoped(every(r.interval, "log retention", round, { jitter: 0.2 }))
      }
      if (s.statsInterval !== false) {
        yield* Effect.forkScoped(every(
          s.statsInterval,
          "log stats",
          Effect.gen(function*() {
            const h = yield* store.horizon
            yield* Metric.update(Metrics.log.oldestOpenTransactionAge, (h.oldestOpenTransactionAgeMs ?? 0) / 1000)
            const groups = yield* store.groups
            for (const g of groups) {
              yield* Metric.update(Metric.withAttributes(Metrics.log.lag, { group: g.group }), g.lag)
            }
          })
        ))
      }
      return LogRelay.of({
        settings: s,
        member,
        isRunning: running.isRunning,
        isPaused: running.isPaused,
        partitions: Effect.sync(() => [...running.ownership.held.keys()].sort((a, b) => a - b)),
        wake: wakeups.signal("local")
      })
    })
  )

/**
 * {@link layer} with its options read from the environment ({@link config}: `TIDINGS_LOG_RELAY_*`, on
 * top of `options.defaults`); a wrong variable fails the layer with one `InvalidConfig` naming every
 * wrong variable.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Decode.EnvironmentOptions<Config> = {}
): Layer.Layer<LogRelay, InvalidConfig, LogStore | Publisher> => Layer.unwrap(Effect.map(config(options), layer))

/**
 * Readiness of the log relay: down when its workers do not run, while an outage pauses it (the
 * publisher or the database unavailable), or when reads are held back by a
 * transaction open for longer than `maxHeldBack` (default 1 minute); the message names that
 * transaction's age (and what the store knows of it), so an operator sees why nothing is published.
 * @since 0.1.0
 * @category health
 */
export const readiness = (
  options: { readonly maxHeldBack?: Duration.Input } = {}
): Health.Check<LogRelay | LogStore> => {
  const limit = Duration.toMillis(Duration.fromInputUnsafe(options.maxHeldBack ?? "1 minute"))
  return {
    name: "log-relay",
    run: Effect.gen(function*() {
      const relay = yield* LogRelay
      if (!(yield* relay.isRunning)) {
        return yield* new Health.CheckFailed({ check: "log-relay", message: "the log relay is not running" })
      }
      if (yield* relay.isPaused) {
        return yield* new Health.CheckFailed({
          check: "log-relay",
          message: "the log relay is paused: the publisher or the database is unavailable"
        })
      }
      const h = yield* LogStore.use((s) => s.horizon).pipe(
        Effect.mapError((e) => new Health.CheckFailed({ check: "log-relay", message: Errors.describe(e) }))
      )
      if (h.oldestOpenTransactionAgeMs !== null && h.oldestOpenTransactionAgeMs > limit) {
        return yield* new Health.CheckFailed({
          check: "log-relay",
          message: `reads are held back by a transaction open for ${
            (h.oldestOpenTransactionAgeMs / 1000).toFixed(1)
          } s${h.detail === null ? "" : ` (${h.detail})`}`
        })
      }
    })
  }
}
