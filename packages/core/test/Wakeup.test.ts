import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import * as Wakeup from "../src/Wakeup.ts"

// `startImmediately`: the fork returns once `take` is waiting, so the relay is idle from that point
// on, in the order of the forks; no time needs to pass for that.
const idle = (mailbox: Wakeup.Mailbox) => Effect.forkChild(mailbox.take, { startImmediately: true })

describe("Wakeup hub", () => {
  it.effect("a signal wakes one idle relay (the longest idle), a second signal the next one", () =>
    Effect.scoped(Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const [a, b, c] = yield* Effect.all([hub.subscribe, hub.subscribe, hub.subscribe])
      const fa = yield* idle(a!)
      const fb = yield* idle(b!)
      const fc = yield* idle(c!)
      yield* hub.signal("local")
      assert.strictEqual(yield* Fiber.join(fa), "local", "the longest idle relay is woken")
      yield* Effect.yieldNow
      assert.isUndefined(fb.pollUnsafe())
      assert.isUndefined(fc.pollUnsafe())
      yield* hub.signal("notify")
      assert.strictEqual(yield* Fiber.join(fb), "notify")
      yield* Effect.yieldNow
      assert.isUndefined(fc.pollUnsafe())
      yield* Fiber.interrupt(fc)
    })))

  it.effect("with no relay idle, every relay keeps the signal; many signals coalesce into one", () =>
    Effect.scoped(Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const [a, b] = yield* Effect.all([hub.subscribe, hub.subscribe])
      for (let i = 0; i < 5; i++) yield* hub.signal("local") // both busy
      assert.strictEqual(yield* a!.take, "local")
      assert.strictEqual(yield* b!.take, "local")
      const again = yield* idle(a!)
      yield* Effect.yieldNow
      assert.isUndefined(again.pollUnsafe(), "the five signals were one")
      yield* Fiber.interrupt(again)
    })))

  it.effect("clear drops a remembered signal", () =>
    Effect.scoped(Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const a = yield* hub.subscribe
      yield* hub.signal("local")
      yield* a.clear
      const waiting = yield* idle(a)
      yield* Effect.yieldNow
      assert.isUndefined(waiting.pollUnsafe())
      yield* Fiber.interrupt(waiting)
    })))
})
