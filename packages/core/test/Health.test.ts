import { assert, describe, it } from "@effect/vitest"
import { startRelay, testTime } from "@tidings/core/testing"
import { Effect, Fiber, Layer } from "effect"
import { TestClock } from "effect/testing"
import { PublishError, Unavailable } from "../src/Errors.ts"
import * as Health from "../src/Health.ts"
import * as MemoryBroker from "../src/MemoryBroker.ts"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"
import * as Relay from "../src/Relay.ts"

const statusOf = (report: Health.Report) => report.checks.map((c) => [c.name, c.status, c.message ?? null])

describe("Health", () => {
  it.effect("make: true or nothing is up; false, a failure or a defect is down with a message; run never fails", () =>
    Effect.gen(function*() {
      const report = yield* Health.run([
        Health.make("void", Effect.void),
        Health.make("true", Effect.succeed(true)),
        Health.up("memory"),
        Health.make("false", Effect.succeed(false), "not connected"),
        Health.make("failed", Effect.fail({ _tag: "StoreError", message: "connection refused" })),
        Health.make("reason", Effect.fail(new PublishError({ message: "channel closed", reason: new Unavailable() }))),
        Health.make("died", Effect.die(new Error("boom")))
      ])
      assert.strictEqual(report.status, "down")
      assert.deepStrictEqual(statusOf(report), [
        ["void", "up", null],
        ["true", "up", null],
        ["memory", "up", null],
        ["false", "down", "not connected"],
        ["failed", "down", "StoreError: connection refused"],
        ["reason", "down", "PublishError: channel closed"],
        ["died", "down", "defect: boom"]
      ])
      assert.isTrue(report.checks.every((c) => c.durationMs >= 0))
      assert.deepStrictEqual(yield* Health.run([]), { status: "up", checks: [] })
    }))

  it.effect("run: a check slower than the timeout is down at the timeout, and the others do not wait for it", () =>
    Effect.gen(function*() {
      const running = yield* Effect.forkChild(
        Health.run([Health.make("hangs", Effect.never), Health.up("fine")], { timeout: "100 millis" }),
        { startImmediately: true }
      )
      yield* TestClock.adjust("99 millis")
      assert.isUndefined(running.pollUnsafe(), "no report before the timeout")
      yield* TestClock.adjust("1 millis")
      const report = yield* Fiber.join(running)
      assert.deepStrictEqual(statusOf(report), [["hangs", "down", "timed out after 100ms"], ["fine", "up", null]])
      assert.deepStrictEqual(report.checks.map((c) => c.durationMs), [100, 0], "the fine check took no time")
    }))

  it.effect("relay: up while the relay's pollers run, down when the relay says it is not running", () =>
    Effect.scoped(
      Effect.gen(function*() {
        const { relay, stop } = yield* startRelay({ statsInterval: false, retention: false })
        const check = Health.run([Health.relay]).pipe(Effect.provideService(Relay.Relay, relay))
        // The pollers start right after the layer is built: ready once they run.
        yield* testTime.eventually(
          Effect.map(check, (r) => r.status === "up"),
          "5 seconds",
          "the relay's pollers to run"
        )
        assert.deepStrictEqual(statusOf(yield* check), [["relay", "up", null]])
        yield* testTime.run(stop)
        const stopped = Layer.succeed(
          Relay.Relay,
          Relay.Relay.of({
            settings: undefined as never,
            relayIds: [],
            isRunning: Effect.succeed(false),
            status: Effect.succeed({ pollers: 0, idle: 0, paused: 0, claims: 0 }),
            wake: Effect.void
          })
        )
        const down = yield* Health.run([Health.relay]).pipe(Effect.provide(stopped))
        assert.deepStrictEqual(statusOf(down), [["relay", "down", "the relay is not running"]])
      }).pipe(Effect.provide(Layer.merge(MemoryOutboxStore.layer, MemoryBroker.layer())))
    ))

  it.effect("relay: down while all its pollers wait for an unavailable publisher, up again when it is back", () =>
    Effect.scoped(
      Effect.gen(function*() {
        const broker = yield* MemoryBroker.MemoryBroker
        const { relay, stop } = yield* startRelay({ concurrency: 2, statsInterval: false, retention: false })
        const check = Effect.map(Health.run([Health.relay]), statusOf).pipe(Effect.provideService(Relay.Relay, relay))
        yield* testTime.eventually(Effect.map(check, (c) => c[0]![1] === "up"), "5 seconds", "ready")
        yield* broker.setAvailable(false)
        yield* relay.wake // the pollers look again and find the publisher away
        yield* testTime.eventually(Effect.map(check, (c) => c[0]![1] === "down"), "5 seconds", "not ready")
        assert.deepStrictEqual(yield* check, [["relay", "down", "paused: the publisher is unavailable"]])
        yield* broker.setAvailable(true)
        yield* testTime.eventually(Effect.map(check, (c) => c[0]![1] === "up"), "5 seconds", "ready again")
        yield* testTime.run(stop)
      }).pipe(Effect.provide(Layer.merge(MemoryOutboxStore.layer, MemoryBroker.layer())))
    ))
})
