/**
 * Relay settings: the options users write (`Config`), their schema (`ConfigSchema`, decoded by
 * `Settings.decode`, naming every wrong path at once), and the settings the relay runs with, whose
 * defaults that depend on other options (claim concurrency, eager limit, publish timeout, reclaim
 * interval) are derived after decoding.
 * @internal
 */
import { Duration, Effect, Schedule, Schema } from "effect"
import type { InvalidConfig } from "../../Errors.ts"
import type { Ordering } from "../../OutboxStore.ts"
import * as Retry from "../../Retry.ts"
import * as Codec from "../../Settings.ts"

/**
 * Relay settings; every field has a default.
 * @since 0.1.0
 * @category models
 */
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
   * in flight, are claimed as usual. It needs the store's `EagerDispatch` registry, which the store
   * layers provide. `poll`: every event is claimed. Unordered relays only (per-key order needs the
   * claim's check that no earlier transaction of the key can still commit).
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
   * pending for a claim. It bounds how far publishing lags behind when producers outpace the
   * broker, at the price of slowing them down to its pace; without it, the excess waits in the
   * table for a claim.
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
  readonly pollInterval?: {
    readonly min?: Duration.Input
    readonly base?: Duration.Input
    readonly max?: Duration.Input
  }
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
  /**
   * How long closing the relay's layer may take (default 10 s), even with a publisher that never
   * answers or a database that is gone: in-flight batches get all of it but the last half second,
   * in which they are interrupted and their claims released. The rest of an operator's
   * `shutdownTimeout + 1 s` is for the layers closed after it and the process's exit.
   */
  readonly shutdownTimeout?: Duration.Input
}

const withDefault = <S extends Schema.Top>(schema: S, value: S["Encoded"]): Codec.Defaulted<S> =>
  schema.pipe(Schema.withDecodingDefault(Effect.succeed(value)))

const durationOr = (
  fallback: Duration.Input,
  options?: { readonly allowZero?: boolean }
): Codec.Defaulted<Codec.DurationSetting> => withDefault(Codec.duration(options), fallback)

const RetrySchedule: Schema.declare<Schedule.Schedule<unknown, unknown>> = Schema.declare(
  (u: unknown): u is Schedule.Schedule<unknown, unknown> => Schedule.isSchedule(u),
  { expected: "a Schedule" }
)

type Defaulted<S extends Schema.Top> = Codec.Defaulted<S>
type Duration_ = Defaulted<Codec.DurationSetting>
type FalseOr<S extends Schema.Top> = Schema.Union<readonly [Schema.Literal<false>, S]>

/**
 * The schema of {@link Config}: what `settings` decodes (defaults that depend on other options are
 * derived after it).
 * @since 0.1.0
 * @category schemas
 */
export const ConfigSchema: Schema.Struct<{
  readonly name: Defaulted<Schema.String>
  readonly concurrency: Defaulted<Codec.IntSetting>
  readonly claimConcurrency: Schema.optional<Codec.IntSetting>
  readonly coalesceClaims: Schema.optional<Schema.Boolean>
  readonly ordering: Defaulted<Schema.Literals<readonly ["unordered", "per-key"]>>
  readonly dispatch: Schema.optional<Schema.Literals<readonly ["eager", "poll"]>>
  readonly eagerLimit: Schema.optional<Codec.IntSetting>
  readonly backpressure: Defaulted<FalseOr<Codec.DurationSetting>>
  readonly maxCrashes: Defaulted<Codec.IntSetting>
  readonly batchSize: Defaulted<Codec.IntSetting>
  readonly lease: Duration_
  readonly pollInterval: Defaulted<
    Schema.Struct<{ readonly min: Duration_; readonly base: Duration_; readonly max: Duration_ }>
  >
  readonly retry: Schema.optional<Schema.declare<Schedule.Schedule<unknown, unknown>>>
  readonly maxAttempts: Defaulted<Codec.IntSetting>
  readonly publishTimeout: Schema.optional<Codec.DurationSetting>
  readonly reclaimInterval: Schema.optional<Codec.DurationSetting>
  readonly retention: Defaulted<
    FalseOr<
      Schema.Struct<
        { readonly olderThan: Duration_; readonly interval: Duration_; readonly batchSize: Defaulted<Codec.IntSetting> }
      >
    >
  >
  readonly statsInterval: Defaulted<FalseOr<Codec.DurationSetting>>
  readonly shutdownTimeout: Duration_
}> = Schema.Struct({
  name: withDefault(
    Schema.String.check(
      Schema.makeFilter((name: string) =>
        /^[\w.:-]{1,64}$/.test(name) ? undefined : "must be 1-64 characters of [A-Za-z0-9_.:-]"
      )
    ),
    "relay"
  ),
  concurrency: withDefault(Codec.int(1, 256), 1),
  claimConcurrency: Schema.optional(Codec.int(1, 256)),
  coalesceClaims: Schema.optional(Schema.Boolean),
  ordering: withDefault(Schema.Literals(["unordered", "per-key"]), "unordered"),
  dispatch: Schema.optional(Schema.Literals(["eager", "poll"])),
  eagerLimit: Schema.optional(Codec.int(1, 10_000_000)),
  backpressure: withDefault(Schema.Union([Schema.Literal(false), Codec.duration()]), false),
  maxCrashes: withDefault(Codec.int(1, 100), 3),
  batchSize: withDefault(Codec.int(1, 10_000), 100),
  lease: durationOr("30 seconds"),
  pollInterval: withDefault(
    Schema.Struct({
      min: durationOr(0, { allowZero: true }),
      base: durationOr("100 millis"),
      max: durationOr("2 seconds")
    }),
    {}
  ),
  retry: Schema.optional(RetrySchedule),
  maxAttempts: withDefault(Codec.int(1, 1000), 10),
  publishTimeout: Schema.optional(Codec.duration()),
  reclaimInterval: Schema.optional(Codec.duration()),
  retention: withDefault(
    Schema.Union([
      Schema.Literal(false),
      Schema.Struct({
        olderThan: durationOr("7 days", { allowZero: true }),
        interval: durationOr("1 minute"),
        batchSize: withDefault(Codec.int(1, 100_000), 1000)
      })
    ]),
    {}
  ),
  statsInterval: withDefault(Schema.Union([Schema.Literal(false), Codec.duration()]), "10 seconds"),
  shutdownTimeout: durationOr("10 seconds", { allowZero: true })
})

// Every Config is valid input for the schema (checked at compile time).
const _configIsEncoded = (config: Config): typeof ConfigSchema.Encoded => config
void _configIsEncoded

/**
 * {@link Config} with defaults applied and validated.
 * @since 0.1.0
 * @category models
 */
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
  readonly retention: false | {
    readonly olderThan: Duration.Duration
    readonly interval: Duration.Duration
    readonly batchSize: number
  }
  readonly statsInterval: Duration.Duration | false
  readonly shutdownTimeout: Duration.Duration
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

/**
 * Applies defaults and validates; invalid settings fail with one `InvalidConfig` naming every
 * wrong setting.
 * @since 0.1.0
 * @category constructors
 */
export const settings = (config: Config = {}): Effect.Effect<Settings, InvalidConfig> =>
  Effect.flatMap(Codec.decode(ConfigSchema, config), (c) => {
    const { base, max, min } = c.pollInterval
    const problems: Array<{ path: string; message: string }> = []
    if (Duration.isGreaterThan(min, base) || Duration.isGreaterThan(base, max)) {
      problems.push({ path: "pollInterval", message: "must satisfy min <= base <= max" })
    }
    const publishTimeout = c.publishTimeout ?? Duration.millis(Math.min(30_000, Duration.toMillis(c.lease) / 2))
    if (!Duration.isLessThan(publishTimeout, c.lease)) {
      problems.push({
        path: "publishTimeout",
        message: "must be shorter than the lease, or another relay could reclaim events still being published"
      })
    }
    if (problems.length > 0) return Effect.fail(Codec.invalid(problems))
    // A single poller has nobody to share with: handing its claims to the claimer's fiber would
    // only add a hop (8% slower at batch 10 and at batch 100, measured).
    const coalesceClaims = c.ordering === "unordered" && c.concurrency > 1 && (c.coalesceClaims ?? true)
    return Effect.succeed<Settings>({
      name: c.name,
      concurrency: c.concurrency,
      claimConcurrency: c.claimConcurrency ??
        (coalesceClaims ? coalescedClaimConcurrency : defaultClaimConcurrency)(c.concurrency, c.batchSize),
      coalesceClaims,
      ordering: c.ordering,
      // per-key order needs every event to go through the claim's check
      dispatch: c.ordering === "per-key" ? "poll" : c.dispatch ?? "eager",
      eagerLimit: c.eagerLimit ?? c.concurrency * c.batchSize,
      backpressure: c.backpressure,
      maxCrashes: c.maxCrashes,
      batchSize: c.batchSize,
      lease: c.lease,
      pollMin: min,
      pollBase: base,
      pollMax: max,
      retry: c.retry ?? Retry.exponentialBackoff(),
      maxAttempts: c.maxAttempts,
      publishTimeout,
      reclaimInterval: c.reclaimInterval ??
        Duration.max(Duration.millis(Math.floor(Duration.toMillis(c.lease) / 4)), Duration.millis(50)),
      retention: c.retention,
      statsInterval: c.statsInterval,
      shutdownTimeout: c.shutdownTimeout
    })
  })
