import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Layer, Redacted, Schedule, Stream } from "effect"
import { freePort } from "../../../test/support/embeddedPostgres.ts"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import { AmqpConnectionError } from "../src/AmqpErrors.ts"
import * as Topology from "../src/Topology.ts"
import {
  amqpUrl,
  captureLogs,
  connect,
  connectionLayer,
  eventually,
  messageCount,
  rawChannel,
  recordingTracer,
  unique
} from "./helpers.ts"

const withPassword = (url: string, password: string) => {
  const u = new URL(url)
  u.password = password
  return u.toString()
}

describe("AmqpConnection", () => {
  it.live("connects, declares its topology, and reports Connected and ready", () =>
    Effect.gen(function*() {
      const queue = unique("conn")
      const topology = Topology.make({ queues: [{ name: queue, type: "classic", autoDelete: true }] })
      const connection = yield* connect({ topology })
      const state = yield* connection.state
      assert.strictEqual(state._tag, "Connected")
      assert.strictEqual(state._tag === "Connected" ? state.generation : 0, 1)
      assert.isTrue(yield* connection.isReady)
      assert.notInclude(connection.description, "guest:")
      assert.match(connection.description, /^amqp:\/\/127\.0\.0\.1:\d+\/$/)
      const raw = yield* rawChannel()
      assert.strictEqual(yield* messageCount(raw, queue), 0) // declared, or checkQueue would fail
    }).pipe(Effect.scoped))

  it.live("wrong credentials: a typed, non-retryable 403 that shows the password nowhere", () =>
    Effect.gen(function*() {
      const password = "Sup3r-S3cret-Pa55"
      const logs = captureLogs()
      const tracing = recordingTracer()
      const exit = yield* Effect.exit(
        Layer.build(
          connectionLayer({ url: Redacted.make(withPassword(amqpUrl(), password)), startupTimeout: "5 seconds" })
        )
      ).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(logs.layer, tracing.layer)))
      assert.isTrue(Exit.isFailure(exit))
      if (!Exit.isFailure(exit)) return
      const error = Cause.findErrorOption(exit.cause)
      assert.isTrue(error._tag === "Some")
      if (error._tag !== "Some") return
      const e = error.value
      assert.instanceOf(e, AmqpConnectionError)
      if (!(e instanceof AmqpConnectionError)) return
      assert.strictEqual(e.code, 403)
      assert.isFalse(e.isRetryable)
      const texts = [
        String(e),
        e.message,
        JSON.stringify(e),
        Cause.pretty(exit.cause),
        ...logs.lines,
        ...tracing.spans.map((s) => JSON.stringify([s.name, Object.fromEntries(s.attributes)]))
      ]
      assert.isAbove(tracing.spans.length, 0, "the connect attempt is traced")
      for (const text of texts) assert.notInclude(text, password)
    }))

  it.live("an unreachable broker: retried until startupTimeout, then a retryable error", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(() => freePort())
      const logs = captureLogs()
      const started = Date.now()
      const exit = yield* Effect.exit(
        Layer.build(connectionLayer({ startupTimeout: "700 millis" }, `amqp://guest:guest@127.0.0.1:${port}/`))
      ).pipe(
        Effect.scoped,
        Effect.provide(logs.layer)
      )
      const elapsed = Date.now() - started
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      assert.strictEqual(error?._tag === "Some" ? error.value._tag : "", "AmqpConnectionError")
      if (error?._tag === "Some" && error.value._tag === "AmqpConnectionError") {
        assert.isTrue(error.value.isRetryable)
        assert.strictEqual(error.value.code, "ECONNREFUSED")
      }
      assert.isAtLeast(
        logs.lines.filter((l) => l.includes("connection attempt")).length,
        2,
        "it retried before giving up"
      )
      assert.isBelow(elapsed, 5000)
    }))

  it.live("startupTimeout is honoured to the end: the last pause is shortened so an attempt is made at the deadline", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(() => freePort())
      const logs = captureLogs()
      const started = Date.now()
      // Backoff 1 s then 2 s: the old loop stopped at ~1 s, because the next full pause would pass 2.5 s.
      const exit = yield* Effect.exit(Layer.build(AmqpConnection.layer({
        url: `amqp://guest:guest@127.0.0.1:${port}/`,
        reconnect: Schedule.exponential("1 second", 2),
        startupTimeout: "2500 millis"
      }))).pipe(Effect.scoped, Effect.provide(logs.layer))
      const elapsed = Date.now() - started
      assert.isTrue(Exit.isFailure(exit))
      assert.isAtLeast(elapsed, 2400, `gave up after ${elapsed} ms`)
      assert.isBelow(elapsed, 2500 + 5000, `gave up after ${elapsed} ms`)
      assert.strictEqual(
        logs.lines.filter((l) => l.includes("connection attempt")).length,
        3,
        "attempts at 0, 1 and 2.5 s"
      )
    }))

  it.live("errors are scrubbed of credentials only: URL userinfo and password fields, not every word equal to the password", () =>
    Effect.gen(function*() {
      // The test broker's password is `guest`, a word that also occurs in ordinary text.
      assert.strictEqual(new URL(amqpUrl()).password, "guest")
      const connection = yield* connect()
      const text =
        `connect to ${amqpUrl()} failed at file:///app/node_modules/.pnpm/guest@3.4.9/index.js: {"password":"guest"} password=guest, guest user`
      const scrubbed = connection.scrub(text)
      assert.notInclude(scrubbed, "guest:guest@")
      assert.include(scrubbed, "amqp://<redacted>@127.0.0.1")
      assert.include(scrubbed, ".pnpm/guest@3.4.9/index.js", "a package path is not a credential")
      assert.include(scrubbed, `{"password":"<redacted>"}`)
      assert.include(scrubbed, "password=<redacted>")
      assert.include(scrubbed, "guest user")
    }).pipe(Effect.scoped))

  it.live("an invalid URL is an InvalidConfig that does not repeat the URL", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Layer.build(AmqpConnection.layer({ url: "http://bob:hunter2hunter2@example/" })))
        .pipe(Effect.scoped)
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      assert.strictEqual(error?._tag === "Some" ? error.value._tag : "", "InvalidConfig")
      assert.notInclude(Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "", "hunter2")
    }))

  it.live("a queue redeclared with other arguments: a non-retryable TopologyError (406)", () =>
    Effect.gen(function*() {
      const queue = unique("precondition")
      yield* Layer.build(
        connectionLayer({ topology: Topology.make({ queues: [{ name: queue, type: "classic", autoDelete: true }] }) })
      )
      const exit = yield* Effect.exit(
        Layer.build(connectionLayer({
          topology: Topology.make({
            queues: [{ name: queue, type: "classic", autoDelete: true, messageTtl: "1 minute" }]
          })
        })).pipe(Effect.scoped)
      )
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      assert.strictEqual(error?._tag === "Some" ? error.value._tag : "", "TopologyError")
      if (error?._tag === "Some" && error.value._tag === "TopologyError") {
        assert.strictEqual(error.value.code, 406)
        assert.strictEqual(error.value.entity, queue)
        assert.isFalse(error.value.isRetryable)
      }
    }).pipe(Effect.scoped))

  it.live("after a drop: Connected -> Reconnecting -> Connected (generation 2), owners re-opened", () =>
    Effect.gen(function*() {
      const connection = yield* connect()
      const seen: Array<string> = []
      const watcher = yield* connection.changes.pipe(
        Stream.runForEach((s) =>
          Effect.sync(() => void seen.push(s._tag === "Connected" ? `Connected#${s.generation}` : s._tag))
        ),
        Effect.forkScoped
      )
      let opens = 0
      yield* connection.register({
        name: "probe",
        open: (channels) => Effect.andThen(channels.channel, Effect.sync(() => void opens++))
      })
      assert.strictEqual(opens, 1)
      yield* eventually(Effect.sync(() => seen.length > 0), "2 seconds", "the first state")
      yield* connection.restart
      yield* eventually(Effect.sync(() => seen.includes("Connected#2")), "10 seconds", "the reconnect")
      yield* eventually(Effect.sync(() => opens === 2), "5 seconds", "the owner re-opened")
      assert.deepStrictEqual(seen.slice(0, 3), ["Connected#1", "Reconnecting", "Connected#2"])
      assert.isTrue(yield* connection.isReady)
      yield* Fiber.interrupt(watcher)
    }).pipe(Effect.scoped))
})
