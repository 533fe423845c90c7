/**
 * The contract every `InboxStore` passes, with `Inbox.handle` and `Projection.handle` on top: the
 * memory store here, the Postgres store in `@tidings/postgres`. The "business write" of the handlers
 * is a projection position (transactional in both stores); outbox events use the paired outbox store.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Layer, Schema, type Scope } from "effect"
import * as Event from "../src/Event.ts"
import * as Inbox from "../src/Inbox.ts"
import { InboxStore, type Service } from "../src/InboxStore.ts"
import { uuidv7 } from "../src/internal/uuid.ts"
import * as Outbox from "../src/Outbox.ts"
import { OutboxStore, type Service as OutboxService } from "../src/OutboxStore.ts"
import * as Projection from "../src/Projection.ts"
import { failureTag } from "@tidings/core/testing"

const Noted = Event.define("inbox.noted", { aggregateType: "note", schema: Schema.Struct({ n: Schema.Int }) })

export interface Stores {
  readonly inbox: Service
  readonly outbox: OutboxService
}

const id = () => uuidv7(Date.now())

/** A handler whose effect is a transactional write (a position bump) plus a JS call counter. */
const bump = (store: Service, key: string, calls: { n: number }) =>
  Effect.gen(function*() {
    calls.n++
    const p = yield* store.lockPosition("effects", key)
    yield* store.setPosition("effects", key, p + 1)
  })

export const inboxContract = (name: string, makeStores: Effect.Effect<Stores, unknown, Scope.Scope>) => {
  const run = <A, E>(body: Effect.Effect<A, E, InboxStore | OutboxStore>) =>
    Effect.scoped(Effect.flatMap(makeStores, (s) => Effect.provide(body, Layer.mergeAll(Layer.succeed(InboxStore, s.inbox), Layer.succeed(OutboxStore, s.outbox)))))

  describe(`Inbox contract: ${name}`, () => {
    it.live("begin counts attempts on a processing row and leaves a processed one alone", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const m = id()
        const first = yield* store.begin(m, "c1", "i1")
        assert.deepStrictEqual([first.status, first.attempts, first.finishedAttempts, first.crashes], ["processing", 1, 0, 0])
        assert.strictEqual((yield* store.begin(m, "c1", "i1")).attempts, 2)
        assert.isTrue(yield* store.withTransaction(store.markProcessed(m, "c1")))
        const done = (yield* store.get(m, "c1"))!
        assert.deepStrictEqual([done.status, done.attempts, done.finishedAttempts, done.processedAt !== null], ["processed", 2, 1, true])
        assert.strictEqual((yield* store.begin(m, "c1", "i1")).attempts, 2)
        assert.isFalse(yield* store.withTransaction(store.markProcessed(m, "c1")))
        // Another consumer has its own row.
        assert.strictEqual((yield* store.begin(m, "c2", "i1")).attempts, 1)
        assert.isUndefined(yield* store.get(id(), "c1"))
        assert.strictEqual(failureTag(yield* Effect.exit(store.markProcessed(m, "c3"))), "NotInTransaction")
      })))

    it.live("a message handled twice has its effect once; the duplicate is reported", () =>
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

    it.live("concurrent duplicates: exactly one runs the handler", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const calls = { n: 0 }
        const m = id()
        const results = yield* Effect.forEach(Array.from({ length: 8 }), () => Inbox.handle("c", m, bump(store, m, calls)), { concurrency: "unbounded" })
        assert.strictEqual(results.filter((r) => r._tag === "Processed").length, 1)
        assert.strictEqual(calls.n, 1)
        assert.strictEqual(yield* store.position("effects", m), 1)
        assert.strictEqual((yield* store.get(m, "c"))!.crashes, 0)
      })))

    it.live("a handler failure rolls back its writes and the mark; the retry applies them once", () =>
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
        const ok = bump(store, m, calls).pipe(Effect.andThen(Outbox.append(Noted, { aggregateId: m, payload: { n: 2 } })))
        assert.strictEqual((yield* Inbox.handle("c", m, ok))._tag, "Processed")
        assert.strictEqual((yield* Inbox.handle("c", m, ok))._tag, "Duplicate")
        assert.strictEqual(yield* store.position("effects", m), 1)
        // The outbox event appended by the handler committed with it, once.
        assert.strictEqual((yield* outbox.stats).pending, 1)
      })))

    it.live("crash loop: attempts that started and never finished dead-letter the message with the reason", () =>
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
        assert.strictEqual(failureTag(yield* Effect.exit(Inbox.handle("c", m, bump(store, m, calls)))), "InboxCrashLoop")
        assert.strictEqual(calls.n, 1)
      })))

    it.live("wrap: a consumer handler that acks duplicates and refuses deliveries without an id", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const calls = { n: 0 }
        const handler = Inbox.wrap("w", (d: { messageId: string | undefined; key: string }) => bump(store, d.key, calls))
        const m = id()
        yield* handler({ messageId: m, key: m })
        yield* handler({ messageId: m, key: m })
        assert.strictEqual(calls.n, 1)
        const missing = yield* Effect.exit(handler({ messageId: undefined, key: m }))
        assert.strictEqual(failureTag(missing), "MissingMessageId")
      })))

    it.live("list and count: the admin views, by status and consumer, newest first, bounded", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        const consumer = `views-${id()}`
        const other = `views-other-${id()}`
        const done = [id(), id(), id()]
        for (const m of done) {
          yield* store.begin(m, consumer, "i1")
          assert.isTrue(yield* store.withTransaction(store.markProcessed(m, consumer)))
          yield* Effect.sleep("5 millis") // distinct receive times: the order is observable
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
        assert.deepStrictEqual(letters.map((r) => [r.messageId, r.status, r.lastError]), [[dead, "failed", "poison: schema mismatch"]])
        const processed = yield* store.list({ consumer, status: "processed", limit: 2 })
        assert.deepStrictEqual(processed.map((r) => r.messageId), [done[2], done[1]])
        assert.strictEqual((yield* store.list({ consumer, limit: 100 })).length, 5)
        assert.isTrue((yield* store.list({ consumer: other, limit: 100 })).every((r) => r.consumer === other))
      })))

    it.live("retention deletes old rows in bounded batches", () =>
      run(Effect.gen(function*() {
        const store = yield* InboxStore
        for (let i = 0; i < 5; i++) yield* Inbox.handle("r", id(), Effect.void)
        yield* Effect.sleep("400 millis")
        const fresh = id()
        yield* Inbox.handle("r", fresh, Effect.void)
        assert.strictEqual(yield* store.prune({ olderThan: Duration.millis(250), limit: 2 }), 2)
        assert.strictEqual(yield* Inbox.pruneOnce({ olderThan: Duration.millis(250), batchSize: 2 }), 3)
        assert.strictEqual(yield* store.prune({ olderThan: Duration.millis(250), limit: 2 }), 0)
        assert.strictEqual((yield* store.get(fresh, "r"))?.status, "processed")
      })))

    it.live("projection: in order per aggregate; stale events skipped, gaps refused, duplicates ignored", () =>
      run(Effect.gen(function*() {
        const view = new Map<string, Array<number>>()
        const p = Projection.make({
          name: "p",
          table: "view",
          position: (e: { agg: string; v: number }) => ({ aggregateId: e.agg, version: e.v }),
          apply: (e: { agg: string; v: number }) => Effect.sync(() => void view.set(e.agg, [...(view.get(e.agg) ?? []), e.v]))
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
        const lag = yield* Effect.exit(Projection.awaitApplied(p, id(), "50 millis"))
        assert.strictEqual(failureTag(lag), "ProjectionLag")
      })))
  })
}
