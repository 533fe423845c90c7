import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import * as Wakeup from "../src/Wakeup.ts"

describe("Wakeup hub", () => {
  it.live("a signal wakes one idle relay (the longest idle), a second signal the next one", () =>
    Effect.scoped(Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const [a, b, c] = yield* Effect.all([hub.subscribe, hub.subscribe, hub.subscribe])
      const fa = yield* Effect.forkChild(a!.take)
      yield* Effect.sleep("10 millis")
      const fb = yield* Effect.forkChild(b!.take)
      const fc = yield* Effect.forkChild(c!.take)
      yield* Effect.sleep("10 millis")
      yield* hub.signal("local")
      yield* Effect.sleep("10 millis")
      assert.isDefined(fa.pollUnsafe(), "the longest idle relay is woken")
      assert.isUndefined(fb.pollUnsafe())
      assert.isUndefined(fc.pollUnsafe())
      yield* hub.signal("notify")
      assert.strictEqual(yield* Fiber.join(fb), "notify")
      assert.isUndefined(fc.pollUnsafe())
      yield* Fiber.interrupt(fc)
    })))

  it.live("with no relay idle, every relay keeps the signal; many signals coalesce into one", () =>
    Effect.scoped(Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const [a, b] = yield* Effect.all([hub.subscribe, hub.subscribe])
      for (let i = 0; i < 5; i++) yield* hub.signal("local") // both busy
      assert.strictEqual(yield* a!.take, "local")
      assert.strictEqual(yield* b!.take, "local")
      const again = yield* Effect.forkChild(a!.take)
      yield* Effect.sleep("20 millis")
      assert.isUndefined(again.pollUnsafe(), "the five signals were one")
      yield* Fiber.interrupt(again)
    })))

  it.live("clear drops a remembered signal", () =>
    Effect.scoped(Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const a = yield* hub.subscribe
      yield* hub.signal("local")
      yield* a.clear
      const waiting = yield* Effect.forkChild(a.take)
      yield* Effect.sleep("20 millis")
      assert.isUndefined(waiting.pollUnsafe())
      yield* Fiber.interrupt(waiting)
    })))
})
