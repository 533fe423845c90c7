/**
 * The settings schema of the memory broker's consumers (kept apart so that `MemoryBroker` stays one
 * readable module).
 * @internal
 */
import { type Duration, Effect, Schema } from "effect"
import * as Consumers from "../Consumer.ts"
import * as Settings from "../Settings.ts"

const check = <T>(ok: (value: T) => boolean, message: string) =>
  Schema.makeFilter((value: T) => ok(value) ? undefined : message)

const topicPattern = (t: string) =>
  /^[\w:#*-]+(\.[\w:#*-]+)*$/.test(t) && !t.split(".").some((w) => /[#*]/.test(w) && w.length > 1)

/**
 * The settings of `MemoryBroker.consume` that are data (the handler, registry and override are not).
 * @since 0.1.0
 * @category settings
 */
export const ConsumerConfigSchema: Schema.Struct<
  typeof Consumers.settingsFields & {
    readonly queue: Schema.String
    readonly types: Schema.optional<Schema.$Array<Schema.String>>
    readonly concurrency: Settings.Defaulted<Settings.IntSetting>
    readonly retryDelays: Settings.Defaulted<Schema.$Array<Settings.DurationSetting>>
  }
> = Schema.Struct({
  queue: Schema.String.check(
    check((q: string) => /^[\w.:-]{1,100}$/.test(q), "must be 1-100 characters of [A-Za-z0-9_.:-]")
  ),
  types: Schema.optional(
    Schema.Array(Schema.String.check(check(topicPattern, "is not an event type or topic pattern")))
      .check(check((ts: ReadonlyArray<string>) => ts.length > 0, "bind at least one event type (or \"#\" for all)"))
  ),
  concurrency: Settings.int(1, 1000).pipe(Schema.withDecodingDefault(Effect.succeed(1))),
  retryDelays: Schema.Array(Settings.duration())
    .check(check((ds: ReadonlyArray<unknown>) => ds.length > 0, "needs at least one delay"))
    .pipe(
      Schema.withDecodingDefault(Effect.succeed<ReadonlyArray<Duration.Input>>(["1 second", "10 seconds", "1 minute"]))
    ),
  ...Consumers.settingsFields
})
