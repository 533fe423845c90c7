/**
 * The contract every `InboxStore` passes, with `Inbox.handle` and `Projection.handle` on top: the
 * memory store (on `TestClock`) and the Postgres store in `@tidings/postgres` (real time). The
 * "business write" of the handlers is a projection position (transactional in both stores); outbox
 * events use the paired outbox store.
 * @since 0.1.0
 * @module
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, Fiber, Layer, Option, Schema, type Scope } from "effect"
import { TestClock } from "effect/testing"
import type * as Consumer from "../Consumer.ts"
import * as Event from "../Event.ts"
import * as Inbox from "../Inbox.ts"
import { InboxStore, type Service } from "../InboxStore.ts"
import { uuidv7 } from "../internal/uuid.ts"
import * as Outbox from "../Outbox.ts"
import { OutboxStore, type Service as OutboxService } from "../OutboxStore.ts"
import * as Projection from "../Projection.ts"

const failureTag = <A, E>(exit: Exit.Exit<A, E>): string | undefined =>
  Exit.isFailure(exit)
    ? Option.getOrUndefined(
      Option.map(Cause.findErrorOption(exit.cause), (e) => (e as { readonly _tag?: string })._tag)
    )
    : undefined

const Noted = Event.define("inbox.noted", { aggregateType: "note", schema: Schema.Struct({ n: Schema.Int }) })

/**
 * The stores a run of the contract uses; the outbox store must join the inbox store's transactions.
 * @since 0.1.0
 * @category models
 */
export interface InboxStores {
  readonly inbox: Service
  readonly outbox: OutboxService
  /**
   * Makes every inbox row older by `age` (a store on a database's `now()` moves its rows back in
   * time); without it the contract lets the time pass (the test clock, for stores that read `Clock`).
   */
  readonly backdate?: (age: Duration.Duration) => Effect.Effect<void, unknown>
}

const id = () => uuidv7(Date.now())

/** A consumer delivery carrying `event` under message id `messageId`. */
const delivery = <A>(messageId: string | undefined, event: A): Consumer.Delivery<A> => ({
  event,
  messageId,
  id: messageId,
  type: "inbox.test",
  version: 1,
  payload: event,
  headers: {},
  attempt: 1,
  redelivered: false,
  aggregateType: undefined,
  aggregateId: undefined,
  orderingKey: undefined,
  occurredAt: undefined,
  queue: "inbox-test",
  exchange: "",
  routingKey: "inbox.test"
})

/** A handler whose effect is a transactional write (a position bump) plus a JS call counter. */
const bump = (store: Service, key: string, calls: { n: number }) =>
  Effect.gen(function*() {
    calls.n++
    const p = yield* store.lockPosition("effects", key)
    yield* store.setPosition("effects", key, p + 1)
  })

/**
 * Registers the contract's tests. `clock: "test"` runs them on `TestClock` (stores that read
 * `Clock`, such as the memory store); `"live"` (default) on real time (a database's `now()`).
 * @since 0.1.0
 * @category contracts
 */
export const inboxContract = (
  name: string,
  makeStores: Effect.Effect<InboxStores, unknown, Scope.Scope>,
  options: { readonly clock?: "test" | "live" } = {}
): void => {
  const clock = options.clock ?? "live"
  const test = clock === "test" ? it.effect : it.live
  /** Lets time pass: the test clock moves, or the real one is waited for. */
  const elapse = (d: Duration.Input) => clock === "test" ? TestClock.adjust(d) : Effect.sleep(d)
  const runWith = <A, E>(body: (stores: InboxStores) => Effect.Effect<A, E, InboxStore | OutboxStore>) =>
    Effect.scoped(
      Effect.flatMap(makeStores, (s) =>
        Effect.provide(
          body(s),
          Layer.mergeAll(Layer.succeed(InboxStore, s.inbox), Layer.succeed(OutboxStore, s.outbox))
        ))
    )
  const run = <A, E>(body: Effect.Effect<A, E, InboxStore | OutboxStore>) => runWith(() => body)

  describe(`Inbox contract: ${name}`, () => {
    test("begin counts attempts on a processing row and leaves a processed one alone", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const m = id()
        const first = yield* store.begin(m, "c1", "i1")
        assert.deepStrictEqual([first.status, first.attempts, first.finishedAttempts, first.crashes], [
          "processing",
          1,
          0,
          0
        ])
        assert.strictEqual((yield* store.begin(m, "c1", "i1")).attempts, 2)
        assert.isTrue(yield* store.withTransaction(store.markProcessed(m, "c1")))
        const done = (yield* store.get(m, "c1"))!
        assert.deepStrictEqual([done.status, done.attempts, done.finishedAttempts, done.processedAt !== null], [
          "processed",
          2,
          1,
          true
        ])
        assert.strictEqual((yield* store.begin(m, "c1", "i1")).attempts, 2)
        assert.isFalse(yield* store.withTransaction(store.markProcessed(m, "c1")))
        // Another consumer has its own row.
        assert.strictEqual((yield* store.begin(m, "c2", "i1")).attempts, 1)
        assert.isUndefined(yield* store.get(id(), "c1"))
        assert.strictEqual(failureTag(yield* Effect.exit(store.markProcessed(m, "c3"))), "NotInTransaction")
      })))

    test("resetFailed forgets a dead-lettered row so that the next delivery is handled; other rows stay", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const m = id()
        yield* store.begin(m, "c1", "i1")
        assert.isFalse(yield* store.resetFailed(m, "c1"), "a processing row is not reset")
        yield* store.markFailed(m, "c1", "crash loop")
        yield* store.markFailed(m, "c2", "crash loop")
        assert.strictEqual((yield* store.count()).failed, 2)
        assert.isTrue(yield* store.resetFailed(m, "c1"))
        assert.isUndefined(yield* store.get(m, "c1"))
        assert.strictEqual((yield* store.get(m, "c2"))?.status, "failed", "another consumer's row stays")
        assert.isFalse(yield* store.resetFailed(m, "c1"))
        const calls = { n: 0 }
        assert.deepStrictEqual(yield* Inbox.handle("c1", m, Effect.as(bump(store, m, calls), 1)), {
          _tag: "Processed",
          value: 1
        })
        assert.strictEqual(calls.n, 1)
        // Inside a transaction, the reset commits (or rolls back) with it.
        const exit = yield* Effect.exit(
          store.withTransaction(Effect.andThen(store.resetFailed(m, "c2"), Effect.fail("rolled back" as const)))
        )
        assert.isTrue(Exit.isFailure(exit))
        assert.strictEqual((yield* store.get(m, "c2"))?.status, "failed")
      })))

    test("a message handled twice has its effect once; the duplicate is reported", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const calls = { n: 0 }
        const m = id()
        const a = yield* Inbox.handle("c", m, Effect.as(bump(store, m, calls), 42))
        const b = yield* Inbox.handle("c", m, Effect.as(bump(store, m, calls), 43))
        assert.deepStrictEqual(a, { _tag: "Processed", value: 42 })
        assert.deepStrictEqual(b, { _tag: "Duplicate" })
        assert.strictEqual(calls.n, 1)
        assert.strictEqual(yield* store.position("effects", m), 1)
      })))

    test("concurrent duplicates: exactly one runs the handler", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const calls = { n: 0 }
        const m = id()
        const results = yield* Effect.forEach(Array.from({ length: 8 }), () =>
          Inbox.handle("c", m, bump(store, m, calls)), { concurrency: "unbounded" })
        assert.strictEqual(
          results.filter((r) =>
            r._tag === "Processed"
          ).length,
          1
        )
        assert.strictEqual(calls.n, 1)
        assert.strictEqual(yield* store.position("effects", m), 1)
        assert.strictEqual((yield* store.get(m, "c"))!.crashes, 0)
      })))

    test("a handler failure rolls back its writes and the mark; the retry applies them once", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const outbox = yield* OutboxStore
        const calls = { n: 0 }
        const m = id()
        const failing = bump(store, m, calls).pipe(
          Effect.andThen(Outbox.append(Noted, { aggregateId: m, payload: { n: 1 } })),
          Effect.andThen(Effect.fail(new Error("boom")))
        )
        const exit = yield* Effect.exit(Inbox.handle("c", m, failing))
        assert.isTrue(Exit.isFailure(exit))
        assert.strictEqual(yield* store.position("effects", m), 0)
        assert.strictEqual((yield* outbox.stats).pending, 0)
        const row = (yield* store.get(m, "c"))!
        assert.deepStrictEqual([row.status, row.attempts, row.finishedAttempts], ["processing", 1, 1])
        assert.match(row.lastError ?? "", /boom/)
        const ok = bump(store, m, calls).pipe(
          Effect.andThen(Outbox.append(Noted, { aggregateId: m, payload: { n: 2 } }))
        )
        assert.strictEqual((yield* Inbox.handle("c", m, ok))._tag, "Processed")
        assert.strictEqual((yield* Inbox.handle("c", m, ok))._tag, "Duplicate")
        assert.strictEqual(yield* store.position("effects", m), 1)
        // The outbox event appended by the handler committed with it, once.
        assert.strictEqual((yield* outbox.stats).pending, 1)
      })))

    test("crash loop: attempts that started and never finished dead-letter the message with the reason", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const calls = { n: 0 }
        const m = id()
        // Three attempts whose process died between the start and the commit.
        for (let i = 0; i < 3; i++) yield* store.begin(m, "c", `dead-${i}`)
        assert.strictEqual((yield* store.get(m, "c"))!.crashes, 2)
        const exit = yield* Effect.exit(Inbox.handle("c", m, bump(store, m, calls), { maxCrashes: 3 }))
        assert.strictEqual(failureTag(exit), "InboxCrashLoop")
        assert.strictEqual(calls.n, 0)
        const row = (yield* store.get(m, "c"))!
        assert.strictEqual(row.status, "failed")
        assert.match(row.lastError ?? "", /crash loop: 3 handling attempts started and none finished/)
        // Failures that rolled back are not crashes: a message failing 5 times is still handled.
        const m2 = id()
        for (let i = 0; i < 5; i++) yield* Effect.exit(Inbox.handle("c", m2, Effect.fail("nope"), { maxCrashes: 3 }))
        assert.strictEqual((yield* Inbox.handle("c", m2, bump(store, m2, calls), { maxCrashes: 3 }))._tag, "Processed")
        // A redelivery of the dead-lettered message fails permanently again without running.
        assert.strictEqual(
          failureTag(yield* Effect.exit(Inbox.handle("c", m, bump(store, m, calls)))),
          "InboxCrashLoop"
        )
        assert.strictEqual(calls.n, 1)
      })))

    test("wrap: a consumer handler that acks duplicates and refuses deliveries without an id", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const calls = { n: 0 }
        const handler = Inbox.wrap("w", (d: Consumer.Delivery<string>) => bump(store, d.event, calls))
        const m = id()
        yield* handler(delivery(m, m))
        yield* handler(delivery(m, m))
        assert.strictEqual(calls.n, 1)
        const missing = yield* Effect.exit(handler(delivery(undefined, m)))
        assert.strictEqual(failureTag(missing), "MissingMessageId")
      })))

    test("list and count: the admin views, by status and consumer, newest first, bounded", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const consumer = `views-${id()}`
        const other = `views-other-${id()}`
        const done = [id(), id(), id()]
        for (const m of done) {
          yield* store.begin(m, consumer, "i1")
          assert.isTrue(yield* store.withTransaction(store.markProcessed(m, consumer)))
          yield* elapse("5 millis") // distinct receive times: the order is observable
        }
        const dead = id()
        yield* store.begin(dead, consumer, "i1")
        yield* store.markFailed(dead, consumer, "poison: schema mismatch")
        yield* store.begin(id(), consumer, "i1") // still processing
        yield* store.begin(id(), other, "i1")

        assert.deepStrictEqual(yield* store.count({ consumer }), { processing: 1, processed: 3, failed: 1 })
        assert.deepStrictEqual(yield* store.count({ consumer: other }), { processing: 1, processed: 0, failed: 0 })
        const all = yield* store.count()
        assert.isAtLeast(all.processing, 2)
        assert.isAtLeast(all.processed, 3)

        const letters = yield* store.list({ consumer, status: "failed", limit: 10 })
        assert.deepStrictEqual(letters.map((r) => [r.messageId, r.status, r.lastError]), [[
          dead,
          "failed",
          "poison: schema mismatch"
        ]])
        const processed = yield* store.list({ consumer, status: "processed", limit: 2 })
        assert.deepStrictEqual(processed.map((r) => r.messageId), [done[2], done[1]])
        assert.strictEqual((yield* store.list({ consumer, limit: 100 })).length, 5)
        assert.isTrue((yield* store.list({ consumer: other, limit: 100 })).every((r) => r.consumer === other))
      })))

    test("retention deletes old rows in bounded batches", () =>
      runWith((stores) =>
        Effect.gen(function*() {
          const store = yield* InboxStore
          for (let i = 0; i < 5; i++) yield* Inbox.handle("r", id(), Effect.void)
          // An hour passes (or the rows are made an hour older): no wall-clock window a slow machine could miss.
          yield* stores.backdate === undefined ? elapse("1 hour") : Effect.orDie(stores.backdate(Duration.hours(1)))
          const fresh = id()
          yield* Inbox.handle("r", fresh, Effect.void)
          assert.strictEqual(yield* store.prune({ olderThan: Duration.minutes(30), limit: 2 }), 2)
          assert.strictEqual(yield* Inbox.pruneOnce({ olderThan: Duration.minutes(30), batchSize: 2 }), 3)
          assert.strictEqual(yield* store.prune({ olderThan: Duration.minutes(30), limit: 2 }), 0)
          assert.strictEqual((yield* store.get(fresh, "r"))?.status, "processed")
        })
      ))

    test("projection: in order per aggregate; stale events skipped, gaps refused, duplicates ignored", () =>
      run(Effect.gen(function*() {
        const view = new Map<string, Array<number>>()
        const p = Projection.make({
          name: "p",
          table: "view",
          position: (e: { agg: string; v: number }) => ({ aggregateId: e.agg, version: e.v }),
          apply: (e: { agg: string; v: number }) =>
            Effect.sync(() => void view.set(e.agg, [...(view.get(e.agg) ?? []), e.v]))
        })
        const agg = id()
        const ids = [id(), id(), id()]
        const gap = yield* Effect.exit(Projection.handle(p, ids[1]!, { agg, v: 2 }))
        assert.strictEqual(failureTag(gap), "ProjectionGap")
        assert.strictEqual(yield* Projection.handle(p, ids[0]!, { agg, v: 1 }), "applied")
        assert.strictEqual(yield* Projection.handle(p, ids[0]!, { agg, v: 1 }), "duplicate")
        assert.strictEqual(yield* Projection.handle(p, ids[1]!, { agg, v: 2 }), "applied")
        // The same version under another message id (e.g. replayed) is stale: skipped.
        assert.strictEqual(yield* Projection.handle(p, ids[2]!, { agg, v: 1 }), "skipped")
        assert.deepStrictEqual(view.get(agg), [1, 2])
        assert.strictEqual(yield* Projection.appliedVersion(p, agg), 2)
        yield* Projection.awaitApplied(p, ids[1]!, "1 second")
        const waiting = yield* Effect.forkChild(Effect.exit(Projection.awaitApplied(p, id(), "50 millis")))
        yield* elapse("60 millis")
        assert.strictEqual(failureTag(yield* Fiber.join(waiting)), "ProjectionLag")
      })))
  })
}
