import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import * as Wakeup from "../src/Wakeup.ts"

/** Lets forked fibers run until `n` relays wait on the hub (they have started their `take`). */
const idle = (hub: Wakeup.Service, n: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1000; i++) {
      if ((yield* hub.idle) === n) return
      yield* Effect.yieldNow
    }
    assert.fail(`expected ${n} idle relays, got ${yield* hub.idle}`)
  })

describe("Wakeup hub", () => {
  it.effect("a signal wakes one idle relay (the longest idle), a second signal the next one", () =>
    Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const [a, b, c] = yield* Effect.all([hub.subscribe, hub.subscribe, hub.subscribe])
      const fa = yield* Effect.forkChild(a!.take)
      yield* idle(hub, 1) // a waits first
      const fb = yield* Effect.forkChild(b!.take)
      yield* idle(hub, 2) // then b
      const fc = yield* Effect.forkChild(c!.take)
      yield* idle(hub, 3)
      yield* hub.signal("local")
      assert.strictEqual(yield* Fiber.join(fa), "local", "the longest idle relay is woken")
      assert.strictEqual(yield* hub.idle, 2, "and only it")
      yield* hub.signal("notify")
      assert.strictEqual(yield* Fiber.join(fb), "notify")
      assert.strictEqual(yield* hub.idle, 1)
      assert.isUndefined(fc.pollUnsafe())
      yield* Fiber.interrupt(fc)
      assert.strictEqual(yield* hub.idle, 0)
    }))

  it.effect("with no relay idle, every relay keeps the signal; many signals coalesce into one", () =>
    Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const [a, b] = yield* Effect.all([hub.subscribe, hub.subscribe])
      for (let i = 0; i < 5; i++) yield* hub.signal("local") // both busy
      assert.strictEqual(yield* a!.take, "local")
      assert.strictEqual(yield* b!.take, "local")
      // a waits again: its mailbox is empty, the five signals were one
      const again = yield* Effect.forkChild(a!.take)
      yield* idle(hub, 1)
      assert.isUndefined(again.pollUnsafe())
      yield* Fiber.interrupt(again)
    }))

  it.effect("every set gets every signal: one idle mailbox of each set, or all of a busy set", () =>
    Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const [r1, r2] = yield* Effect.all([hub.subscribe, hub.subscribe])
      const [g1, g2] = yield* Effect.all([hub.subscribeTo("log:a:m1"), hub.subscribeTo("log:a:m1")])
      const other = yield* hub.subscribeTo("log:b:m1")
      const fr1 = yield* Effect.forkChild(r1!.take)
      const fg1 = yield* Effect.forkChild(g1!.take)
      yield* idle(hub, 2) // r2, g2 and the other set's mailbox are busy
      yield* hub.signal("notify")
      assert.strictEqual(yield* Fiber.join(fr1), "notify", "the idle per-row relay")
      assert.strictEqual(yield* Fiber.join(fg1), "notify", "and the idle worker of the log group")
      assert.strictEqual(yield* other.take, "notify", "a busy set keeps it")
      // Where a set had an idle mailbox, its busy ones were left out.
      const left = [yield* Effect.forkChild(r2!.take), yield* Effect.forkChild(g2!.take)]
      yield* idle(hub, 2)
      for (const f of left) {
        assert.isUndefined(f.pollUnsafe())
        yield* Fiber.interrupt(f)
      }
    }))

  it.effect("clear drops a remembered signal", () =>
    Effect.gen(function*() {
      const hub = Wakeup.makeHub()
      const a = yield* hub.subscribe
      yield* hub.signal("local")
      yield* a.clear
      const waiting = yield* Effect.forkChild(a.take)
      yield* idle(hub, 1) // waiting: nothing was left in the mailbox
      assert.isUndefined(waiting.pollUnsafe())
      yield* Fiber.interrupt(waiting)
    }))
})
