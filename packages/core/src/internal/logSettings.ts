import { Duration, Effect, Schema } from "effect"
import type { InvalidConfig } from "../Errors.ts"
import * as Settings from "../Settings.ts"

const d = (input: Duration.Input): Effect.Effect<Duration.Input> => Effect.succeed<Duration.Input>(input)

type Defaulted<S extends Schema.Top> = Settings.Defaulted<S>
type Duration_ = Defaulted<Settings.DurationSetting>

/** A group name: what cursors and leases are kept under. */
export const GroupName: Schema.String = Schema.String.check(
  Schema.makeFilter((g: string) =>
    /^[\w.:-]{1,64}$/.test(g)
      ? undefined
      : `must be 1-64 characters of [A-Za-z0-9_.:-], got ${JSON.stringify(g).slice(0, 80)}`
  )
)

/** The type of {@link PollInterval}. */
export type PollIntervalSchema = Schema.Struct<{
  readonly min: Duration_
  readonly base: Duration_
  readonly max: Duration_
}>

/** Adaptive polling: `min` after a batch, `base` after an empty read, doubling to `max` while idle. */
export const PollInterval: PollIntervalSchema = Schema.Struct({
  min: Settings.duration({ allowZero: true }).pipe(Schema.withDecodingDefault(d(0))),
  base: Settings.duration().pipe(Schema.withDecodingDefault(d("100 millis"))),
  max: Settings.duration().pipe(Schema.withDecodingDefault(d("2 seconds")))
})

/** The type of {@link groupFields}, for explicit types on the exported config schemas. */
export type GroupFields = {
  readonly concurrency: Defaulted<Settings.IntSetting>
  readonly lease: Duration_
  readonly pollInterval: Defaulted<PollIntervalSchema>
  readonly maxAttempts: Defaulted<Settings.IntSetting>
  readonly maxCrashes: Defaulted<Settings.IntSetting>
  readonly startFrom: Defaulted<Schema.Literals<readonly ["earliest", "latest"]>>
  readonly shutdownTimeout: Duration_
}

/** The settings every log group member has (relays and consumers), with their defaults. */
export const groupFields: GroupFields = {
  /** Workers of this instance, each reading its share of the held partitions. */
  concurrency: Settings.int(1, 64).pipe(Schema.withDecodingDefault(Effect.succeed(2))),
  /** How long a lease holds; leases are renewed every third of it, and rebalancing takes about one. */
  lease: Settings.duration().pipe(Schema.withDecodingDefault(d("30 seconds"))),
  pollInterval: PollInterval.pipe(Schema.withDecodingDefault(Effect.succeed({}))),
  /** Failed attempts of an event before it moves to the failed table. */
  maxAttempts: Settings.int(1, 1000).pipe(Schema.withDecodingDefault(Effect.succeed(10))),
  /** Crashes (owners that died or hung with the event in flight) before it moves to the failed table. */
  maxCrashes: Settings.int(1, 100).pipe(Schema.withDecodingDefault(Effect.succeed(3))),
  /** Where a new group starts: every event still in the log, or only those written from now on. */
  startFrom: Schema.Literals(["earliest", "latest"]).pipe(
    Schema.withDecodingDefault(Effect.succeed("earliest" as const))
  ),
  /** How long shutdown waits for in-flight batches before interrupting them. */
  shutdownTimeout: Settings.duration({ allowZero: true }).pipe(Schema.withDecodingDefault(d("10 seconds")))
} as const

/** Checks `min <= base <= max` of a decoded poll interval. */
export const checkPoll = (p: typeof PollInterval.Type, prefix = "pollInterval"): InvalidConfig | undefined =>
  Duration.isGreaterThan(p.min, p.base) || Duration.isGreaterThan(p.base, p.max)
    ? Settings.invalid([{ path: prefix, message: "must satisfy min <= base <= max" }])
    : undefined

/** A random member id: `<group>-<random>` (one per layer instance). */
export const memberId = (group: string): string => `${group}-${Math.random().toString(36).slice(2, 10)}`
