import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Exit, Redacted, Schema } from "effect"
import { InvalidConfig } from "../src/Errors.ts"
import * as LogRelay from "../src/LogRelay.ts"
import * as Relay from "../src/Relay.ts"
import * as Settings from "../src/Settings.ts"

const withEnv = (env: Record<string, string>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))

const failure = <A>(exit: Exit.Exit<A, InvalidConfig>): InvalidConfig => {
  assert.isTrue(Exit.isFailure(exit), "expected a failure")
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined
  assert.instanceOf(error, InvalidConfig)
  return error!
}

const Component = Schema.Struct({
  url: Settings.secret({ check: (s) => s.startsWith("amqp://") ? undefined : "must be an amqp:// URL" }),
  name: Schema.String.pipe(Schema.withDecodingDefault(Effect.succeed("tidings"))),
  concurrency: Settings.int(1, 100).pipe(Schema.withDecodingDefault(Effect.succeed(4))),
  lease: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("30 seconds"))),
  cutoff: Schema.Union([Schema.Literal(false), Settings.duration()]).pipe(
    Schema.withDecodingDefault(Effect.succeed<false | Duration.Input>(false))
  ),
  mode: Schema.Literals(["fast", "safe"]).pipe(Schema.withDecodingDefault(Effect.succeed("safe" as const))),
  verbose: Schema.optional(Schema.Boolean),
  delays: Schema.optional(Schema.Array(Settings.duration())),
  poll: Schema.Struct({
    min: Settings.duration({ allowZero: true }).pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>(0))),
    max: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("2 seconds")))
  }).pipe(Schema.withDecodingDefault(Effect.succeed({})))
})

describe("Settings from the environment", () => {
  it("names one variable per data field, nested groups joined with _", () => {
    const vars = Settings.variables(Component, "TIDINGS_X")
    assert.deepStrictEqual(vars.map((v) => [v.name, v.kind]), [
      ["TIDINGS_X_URL", "secret"],
      ["TIDINGS_X_NAME", "string"],
      ["TIDINGS_X_CONCURRENCY", "number"],
      ["TIDINGS_X_LEASE", "duration"],
      ["TIDINGS_X_CUTOFF", "duration"],
      ["TIDINGS_X_MODE", "literal"],
      ["TIDINGS_X_VERBOSE", "boolean"],
      ["TIDINGS_X_DELAYS", "duration"],
      ["TIDINGS_X_POLL_MIN", "duration"],
      ["TIDINGS_X_POLL_MAX", "duration"]
    ])
    assert.deepStrictEqual(vars.filter((v) => v.required).map((v) => v.name), ["TIDINGS_X_URL"])
    const defaults = Settings.defaults(Component, "TIDINGS_X")
    assert.strictEqual(defaults.get("TIDINGS_X_LEASE"), "30 seconds")
    assert.strictEqual(defaults.get("TIDINGS_X_POLL_MAX"), "2 seconds")
    assert.strictEqual(defaults.get("TIDINGS_X_CUTOFF"), "false")
    assert.isFalse(defaults.has("TIDINGS_X_URL"))
  })

  it.effect("decodes text into the same settings as object config", () =>
    Effect.gen(function*() {
      const s = yield* Settings.fromConfig(Component, "TIDINGS_X").pipe(withEnv({
        TIDINGS_X_URL: "amqp://guest:s3cret@127.0.0.1:5672",
        TIDINGS_X_CONCURRENCY: "8",
        TIDINGS_X_LEASE: "20 seconds",
        TIDINGS_X_CUTOFF: "1500",
        TIDINGS_X_MODE: "fast",
        TIDINGS_X_VERBOSE: "yes",
        TIDINGS_X_DELAYS: "1 second, 10 seconds",
        TIDINGS_X_POLL_MAX: "1 minute"
      }))
      const fromObject = yield* Settings.decode(Component, {
        url: "amqp://guest:s3cret@127.0.0.1:5672",
        concurrency: 8,
        lease: "20 seconds",
        cutoff: 1500,
        mode: "fast",
        verbose: true,
        delays: ["1 second", "10 seconds"],
        poll: { max: "1 minute" }
      })
      assert.isTrue(Redacted.isRedacted(s.url))
      assert.strictEqual(Redacted.value(s.url), "amqp://guest:s3cret@127.0.0.1:5672")
      assert.deepStrictEqual({ ...s, url: "" }, { ...fromObject, url: "" })
      assert.strictEqual(Duration.toMillis(s.poll.max), 60_000)
      const off = yield* Settings.fromConfig(Component, "TIDINGS_X").pipe(
        withEnv({ TIDINGS_X_URL: "amqp://h", TIDINGS_X_CUTOFF: "off" })
      )
      assert.strictEqual(off.cutoff, false)
    }))

  it.effect("code gives defaults; variables that are set win", () =>
    Effect.gen(function*() {
      const s = yield* Settings.fromConfig(Component, "TIDINGS_X", {
        defaults: { url: "amqp://code", concurrency: 2, name: "orders" }
      }).pipe(
        withEnv({ TIDINGS_X_CONCURRENCY: "3" })
      )
      assert.strictEqual(s.concurrency, 3)
      assert.strictEqual(s.name, "orders")
      assert.strictEqual(Redacted.value(s.url), "amqp://code")
    }))

  it.effect("a wrong configuration is ONE InvalidConfig naming every wrong variable, never a secret's value", () =>
    Effect.gen(function*() {
      const error = failure(
        yield* Effect.exit(
          Settings.fromConfig(Component, "TIDINGS_X").pipe(withEnv({
            TIDINGS_X_URL: "postgres://user:hunter2@db",
            TIDINGS_X_CONCURRENCY: "lots",
            TIDINGS_X_LEASE: "soon",
            TIDINGS_X_MODE: "reckless",
            TIDINGS_X_DELAYS: "1 second,x",
            TIDINGS_X_POLL_MIN: "-5"
          }))
        )
      )
      assert.deepStrictEqual(error.issues!.map((i) => i.path), [
        "TIDINGS_X_URL",
        "TIDINGS_X_CONCURRENCY",
        "TIDINGS_X_LEASE",
        "TIDINGS_X_MODE",
        "TIDINGS_X_DELAYS",
        "TIDINGS_X_POLL_MIN"
      ])
      assert.strictEqual(error.issues![0]!.message, "must be an amqp:// URL")
      assert.include(error.issues![1]!.message, "got \"lots\"")
      assert.include(error.issues![4]!.message, "(item 2)")
      assert.notInclude(error.message, "hunter2")
      const missing = failure(yield* Effect.exit(Settings.fromConfig(Component, "TIDINGS_X").pipe(withEnv({}))))
      assert.deepStrictEqual(missing.issues, [{ path: "TIDINGS_X_URL", message: "is required but not set" }])
    }))

  it.effect("Settings.all gathers the problems of several components into one error", () =>
    Effect.gen(function*() {
      const error = failure(
        yield* Effect.exit(
          Settings.all({
            a: Settings.fromConfig(Component, "TIDINGS_A"),
            b: Settings.fromConfig(Component, "TIDINGS_B")
          }).pipe(withEnv({ TIDINGS_A_URL: "amqp://a", TIDINGS_A_CONCURRENCY: "0", TIDINGS_B_LEASE: "0" }))
        )
      )
      assert.deepStrictEqual(error.issues!.map((i) => i.path), [
        "TIDINGS_A_CONCURRENCY",
        "TIDINGS_B_URL",
        "TIDINGS_B_LEASE"
      ])
    }))

  it.effect("the relay's schema: nested poll interval, retention switch, cross-field rules by variable", () =>
    Effect.gen(function*() {
      const names = Settings.variables(Relay.ConfigSchema, "TIDINGS_RELAY").map((v) => v.name)
      assert.includeMembers(names, [
        "TIDINGS_RELAY_CONCURRENCY",
        "TIDINGS_RELAY_LEASE",
        "TIDINGS_RELAY_POLL_INTERVAL_MAX",
        "TIDINGS_RELAY_RETENTION",
        "TIDINGS_RELAY_RETENTION_OLDER_THAN"
      ])
      assert.notInclude(names, "TIDINGS_RELAY_RETRY") // a Schedule: code only
      const config = yield* Relay.config().pipe(
        withEnv({ TIDINGS_RELAY_CONCURRENCY: "4", TIDINGS_RELAY_RETENTION: "false", TIDINGS_RELAY_LEASE: "20 seconds" })
      )
      const s = yield* Relay.settings(config)
      assert.strictEqual(s.concurrency, 4)
      assert.strictEqual(s.retention, false)
      assert.strictEqual(Duration.toMillis(s.lease), 20_000)
      const error = failure(
        yield* Effect.exit(
          Relay.config().pipe(
            withEnv({ TIDINGS_RELAY_LEASE: "10 seconds", TIDINGS_RELAY_PUBLISH_TIMEOUT: "20 seconds" })
          )
        )
      )
      assert.deepStrictEqual(error.issues!.map((i) => i.path), ["TIDINGS_RELAY_PUBLISH_TIMEOUT"])
    }))

  it.effect("the log relay's schema: TIDINGS_LOG_RELAY_*, the retention switch, cross-field rules by variable", () =>
    Effect.gen(function*() {
      const names = Settings.variables(LogRelay.ConfigSchema, "TIDINGS_LOG_RELAY").map((v) => v.name)
      assert.includeMembers(names, [
        "TIDINGS_LOG_RELAY_GROUP",
        "TIDINGS_LOG_RELAY_CONCURRENCY",
        "TIDINGS_LOG_RELAY_LEASE",
        "TIDINGS_LOG_RELAY_RETENTION",
        "TIDINGS_LOG_RELAY_START_FROM"
      ])
      const config = yield* LogRelay.config().pipe(
        withEnv({
          TIDINGS_LOG_RELAY_GROUP: "billing",
          TIDINGS_LOG_RELAY_RETENTION: "false",
          TIDINGS_LOG_RELAY_LEASE: "20 seconds"
        })
      )
      const s = yield* LogRelay.settings(config)
      assert.strictEqual(s.group, "billing")
      assert.strictEqual(s.retention, false)
      assert.strictEqual(Duration.toMillis(s.lease), 20_000)
      const error = failure(
        yield* Effect.exit(
          LogRelay.config().pipe(
            withEnv({ TIDINGS_LOG_RELAY_LEASE: "10 seconds", TIDINGS_LOG_RELAY_PUBLISH_TIMEOUT: "20 seconds" })
          )
        )
      )
      assert.deepStrictEqual(error.issues!.map((i) => i.path), ["TIDINGS_LOG_RELAY_PUBLISH_TIMEOUT"])
      const bad = failure(
        yield* Effect.exit(LogRelay.config().pipe(withEnv({ TIDINGS_LOG_RELAY_START_FROM: "middle" })))
      )
      assert.deepStrictEqual(bad.issues!.map((i) => i.path), ["TIDINGS_LOG_RELAY_START_FROM"])
    }))
})
