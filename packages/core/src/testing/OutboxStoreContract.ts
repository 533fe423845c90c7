/**
 * The contract every `OutboxStore` passes: the memory store and the Postgres store in this
 * repository, and any third-party store (see docs/writing-a-driver.md). Time-dependent cases (leases,
 * retry delays, retention) let time pass through a {@link Time}: on `TestClock` for a store whose
 * time comes from `Clock` (`clock: "test"`), in real time for a database (`clock: "live"`, the
 * default).
 * @since 0.1.0
 * @module
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Fiber, Layer, Option, type Scope } from "effect"
import * as EagerDispatch from "../EagerDispatch.ts"
import * as Outbox from "../Outbox.ts"
import { type ClaimedEvent, OutboxStore, type Service } from "../OutboxStore.ts"
import { draft, failureTag, liveTime, seed, testTime, Thing, type Time } from "./helpers.ts"
import { adminViewTests } from "./outbox/adminViews.ts"

/**
 * Options of the contract suites.
 * @since 0.1.0
 * @category models
 */
export interface ContractOptions {
  /** `test`: run on `TestClock` (the store reads `Clock`); `live` (default): real time. */
  readonly clock?: "test" | "live"
}

/**
 * The suite's time and test registrar for `options`.
 * @since 0.1.0
 * @category time
 */
export const timeOf = (options: ContractOptions = {}): { readonly time: Time; readonly test: typeof it.live } => {
  const time = options.clock === "test" ? testTime : liveTime
  return { time, test: options.clock === "test" ? it.effect : it.live }
}

/**
 * A per-key claim that expects events: per-key claims wait for every older transaction in the
 * database to end, and tests in other files may hold one open for a moment.
 */
const claimSome = (time: Time, store: Service, options: Parameters<Service["claim"]>[0]) =>
  Effect.gen(function*() {
    const until = (yield* time.now) + 5_000
    while (true) {
      const got: ReadonlyArray<ClaimedEvent> = yield* store.claim(options)
      if (got.length > 0 || (yield* time.now) >= until) return got
      yield* time.advance("25 millis")
    }
  })

const ids = (claimed: ReadonlyArray<{ readonly message: { readonly id: string } }>) => claimed.map((c) => c.message.id)
const lease = Duration.seconds(30)

/**
 * Registers the outbox store contract for a store built fresh for each test (in the test's scope).
 * @since 0.1.0
 * @category contracts
 */
export const outboxStoreContract = (
  name: string,
  makeStore: Effect.Effect<Service, unknown, Scope.Scope>,
  options: ContractOptions = {}
): void => {
  const { test, time } = timeOf(options)
  const run = <A, E>(body: Effect.Effect<A, E, OutboxStore>) =>
    Effect.scoped(
      Effect.flatMap(makeStore, (store) =>
        Effect.provide(body, Layer.mergeAll(Layer.succeed(OutboxStore, store), Layer.fresh(EagerDispatch.layer))))
    )

  describe(`OutboxStore contract: ${name}`, () => {
    test("append outside a transaction is a typed error and writes nothing", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const exit = yield* Effect.exit(Outbox.append(Thing, { aggregateId: "x", payload: { n: 1, label: "a" } }))
        assert.strictEqual(failureTag(exit), "NotInTransaction")
        assert.strictEqual((yield* store.stats).pending, 0)
      })))

    test("committed events are claimed in append order with their fields intact", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const written = yield* store.withTransaction(
          Outbox.appendAll([
            Thing.make({
              aggregateId: "order-1",
              payload: { n: 1, label: "ü \"quoted\" \n" },
              headers: { "x-tenant": "t1" }
            }),
            Thing.make({ aggregateId: "order-2", orderingKey: "customer-9", payload: { n: 2, label: "b" } })
          ])
        )
        const claimed = yield* store.claim({ relayId: "r1", batchSize: 10, lease })
        assert.deepStrictEqual(ids(claimed), written.map((m) => m.id))
        const [first, second] = claimed
        assert.deepStrictEqual(first!.message.payload, { n: 1, label: "ü \"quoted\" \n" })
        assert.strictEqual(first!.message.headers["x-tenant"], "t1")
        assert.strictEqual(first!.message.orderingKey, "order-1")
        assert.strictEqual(first!.message.type, "thing.happened")
        assert.strictEqual(first!.message.version, 1)
        assert.strictEqual(first!.message.aggregateType, "thing")
        assert.strictEqual(first!.message.occurredAt.getTime(), written[0]!.occurredAt.getTime())
        assert.strictEqual(first!.attempts, 1)
        assert.strictEqual(second!.message.orderingKey, "customer-9")
        assert.deepStrictEqual(yield* store.claim({ relayId: "r2", batchSize: 10, lease }), [])
      })))

    test("a rolled-back transaction writes nothing and runs no after-commit hook", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        let hooks = 0
        const exit = yield* Effect.exit(store.withTransaction(Effect.gen(function*() {
          yield* Outbox.appendAll([draft(1), draft(2)])
          yield* store.afterCommit(Effect.sync(() => void hooks++))
          return yield* Effect.fail("business rule violated" as const)
        })))
        assert.isTrue(Exit.isFailure(exit))
        assert.strictEqual(hooks, 0)
        assert.deepStrictEqual(yield* store.claim({ relayId: "r", batchSize: 10, lease }), [])
        yield* store.withTransaction(
          Effect.andThen(Outbox.appendAll([draft(3)]), store.afterCommit(Effect.sync(() => void hooks++)))
        )
        assert.strictEqual(hooks, 1)
      })))

    test("interruption of the transaction rolls it back", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const appended = yield* Deferred.make<void>()
        const fiber = yield* Effect.forkChild(store.withTransaction(
          Outbox.appendAll([draft(1)]).pipe(
            Effect.andThen(Deferred.succeed(appended, undefined)),
            Effect.andThen(Effect.never)
          )
        ))
        yield* Deferred.await(appended)
        yield* Fiber.interrupt(fiber)
        assert.strictEqual((yield* store.stats).pending, 0)
      })))

    test("concurrent claims take disjoint batches that cover every event", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const all = yield* seed(200)
        const claims = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, i) => `r${i}`),
          (relayId) => store.claim({ relayId, batchSize: 30, lease }),
          { concurrency: "unbounded" }
        )
        const more = yield* store.claim({ relayId: "late", batchSize: 1000, lease })
        const got = [...claims.flatMap(ids), ...ids(more)]
        assert.strictEqual(got.length, 200)
        assert.strictEqual(new Set(got).size, 200)
        assert.deepStrictEqual([...got].sort(), [...all].sort())
        for (const c of claims) assert.isAtMost(c.length, 30)
      })))

    test("settle: published, retried after its delay, failed; a lost claim is left alone", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const [a, b, c, d] = yield* seed(4)
        yield* store.claim({ relayId: "r1", batchSize: 4, lease })
        const settled = yield* store.settle("r1", {
          published: [a!],
          retry: [{ id: b!, delay: Duration.millis(400), error: "broker said no" }],
          failed: [{ id: c!, error: "poison" }]
        })
        assert.strictEqual(settled, 3)
        // d is claimed by r1: another relay's settle must not touch it
        assert.strictEqual(yield* store.settle("intruder", { published: [d!], retry: [], failed: [] }), 0)
        let stats = yield* store.stats
        assert.deepStrictEqual([stats.published, stats.pending, stats.processing, stats.failed], [1, 1, 1, 1])
        assert.deepStrictEqual(yield* store.claim({ relayId: "r2", batchSize: 10, lease }), [])
        yield* time.advance("600 millis")
        const again = yield* store.claim({ relayId: "r2", batchSize: 10, lease })
        assert.deepStrictEqual(ids(again), [b!])
        assert.strictEqual(again[0]!.attempts, 2)
        const failed = yield* store.listFailed({ limit: 10 })
        assert.deepStrictEqual(failed.map((f) => [f.message.id, f.lastError]), [[c!, "poison"]])
        assert.strictEqual(yield* store.retryFailed([c!]), 1)
        const retried = yield* store.claim({ relayId: "r3", batchSize: 10, lease })
        assert.deepStrictEqual(ids(retried), [c!])
        assert.strictEqual(retried[0]!.attempts, 1)
        yield* store.settle("r3", { published: [], retry: [], failed: [{ id: c!, error: "poison again" }] })
        assert.strictEqual(yield* store.discardFailed([c!, a!]), 1) // a is published: not discarded
        stats = yield* store.stats
        assert.strictEqual(stats.failed, 0)
        assert.strictEqual(stats.published, 1)
      })))

    test("an expired lease is reclaimed; release gives events back without counting the attempt", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const [a, b] = yield* seed(2)
        yield* store.claim({ relayId: "crashed", batchSize: 1, lease: Duration.millis(300) })
        yield* store.claim({ relayId: "stopping", batchSize: 1, lease })
        assert.deepStrictEqual(yield* store.reclaimExpired({ maxCrashes: 3 }), { suspect: 0, failed: 0 })
        assert.strictEqual(yield* store.release("stopping", [b!]), 1)
        yield* time.advance("500 millis")
        assert.deepStrictEqual(yield* store.reclaimExpired({ maxCrashes: 3 }), { suspect: 1, failed: 0 })
        // the crashed relay's event is now suspect: not in normal batches, claimed alone
        const claimed = yield* store.claim({ relayId: "survivor", batchSize: 10, lease })
        assert.deepStrictEqual(ids(claimed), [b!])
        assert.strictEqual(claimed[0]!.attempts, 1)
        const suspect = yield* store.claimSuspect({ relayId: "survivor", lease })
        assert.strictEqual(suspect?.message.id, a!)
        assert.strictEqual(suspect?.attempts, 2)
        assert.isUndefined(yield* store.claimSuspect({ relayId: "survivor", lease }))
        // the crashed relay's late settle is ignored: the survivor owns the events now
        assert.strictEqual(yield* store.settle("crashed", { published: [a!], retry: [], failed: [] }), 0)
      })))

    test("append with a claim: the rows are the claimant's; settled by it, or reclaimed as suspects when its lease ends", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const write = (relayId: string, lease: Duration.Duration, from: number) =>
          Effect.gen(function*() {
            const messages = yield* Effect.forEach([0, 1], (i) =>
              Outbox.encode(draft(from + i), Date.now(), Option.none()))
            yield* store.withTransaction(store.append(messages, { relayId, lease }))
            return messages.map((m) =>
              m.id
            )
          })
        const [a, b] = yield* write("eager", lease, 0)
        const [c, d] = yield* write("gone", Duration.millis(300), 2)
        const [e] = yield* seed(1, 4)
        const stats = yield* store.stats
        assert.deepStrictEqual([stats.pending, stats.processing, stats.published], [1, 4, 0])
        // nobody else can claim them
        assert.deepStrictEqual(ids(yield* store.claim({ relayId: "other", batchSize: 10, lease })), [e!])
        assert.strictEqual(yield* store.settle("other", { published: [a!], retry: [], failed: [] }), 0)
        // the claimant settles them; their first attempt was counted when they were written
        assert.strictEqual(
          yield* store.settle("eager", {
            published: [a!],
            retry: [{ id: b!, delay: Duration.millis(0), error: "nack" }],
            failed: []
          }),
          2
        )
        const retried = yield* store.claim({ relayId: "other", batchSize: 10, lease })
        assert.deepStrictEqual(ids(retried), [b!])
        assert.strictEqual(retried[0]!.attempts, 2)
        // the claimant died before settling: after the lease, its rows are suspects (a started, unfinished attempt)
        yield* time.advance("500 millis")
        assert.deepStrictEqual(yield* store.reclaimExpired({ maxCrashes: 3 }), { suspect: 2, failed: 0 })
        const first = yield* store.claimSuspect({ relayId: "other", lease })
        assert.strictEqual(first?.message.id, c!)
        assert.strictEqual(first?.attempts, 2)
        assert.strictEqual((yield* store.claimSuspect({ relayId: "other", lease }))?.message.id, d!)
      })))

    test("per-key: a key's events are claimed in order, and a key with an event in flight is skipped", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const [a1, a2, b1] = yield* store.withTransaction(
          Outbox.appendAll([draft(1, "A"), draft(2, "A"), draft(3, "B")])
        ).pipe(
          Effect.map((ms) => ms.map((m) => m.id))
        )
        const first = yield* claimSome(time, store, { relayId: "r1", batchSize: 1, lease, ordering: "per-key" })
        assert.deepStrictEqual(ids(first), [a1!])
        const second = yield* claimSome(time, store, { relayId: "r2", batchSize: 10, lease, ordering: "per-key" })
        assert.deepStrictEqual(ids(second), [b1!], "A is blocked while A1 is in flight")
        const next = yield* store.settleAndClaim("r1", { published: [a1!], retry: [], failed: [] }, {
          relayId: "r1",
          batchSize: 10,
          lease,
          ordering: "per-key"
        })
        const after = next.length > 0
          ? next
          : yield* claimSome(time, store, { relayId: "r1", batchSize: 10, lease, ordering: "per-key" })
        assert.deepStrictEqual(ids(after), [a2!])
      })))

    test("per-key: a claim takes a key's consecutive events; a retried event holds back its key until due", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const written = yield* store.withTransaction(
          Outbox.appendAll([draft(1, "A"), draft(2, "A"), draft(3, "A"), draft(4, "B")])
        )
        const [a1, a2, a3, b1] = written.map((m) => m.id)
        const claimed = yield* claimSome(time, store, { relayId: "r", batchSize: 10, lease, ordering: "per-key" })
        assert.deepStrictEqual(ids(claimed), [a1!, a2!, a3!, b1!])
        // A1 failed once: A2 and A3 were never attempted and go back behind it
        yield* store.settle("r", {
          published: [b1!],
          retry: [{ id: a1!, delay: Duration.millis(400), error: "nack" }],
          failed: [],
          released: [a2!, a3!]
        })
        assert.deepStrictEqual(yield* store.claim({ relayId: "r", batchSize: 10, lease, ordering: "per-key" }), [])
        yield* time.advance("550 millis")
        const again = yield* claimSome(time, store, { relayId: "r", batchSize: 10, lease, ordering: "per-key" })
        assert.deepStrictEqual(ids(again), [a1!, a2!, a3!])
        assert.deepStrictEqual(again.map((c) => c.attempts), [2, 1, 1])
        // a failed head lets its key move on
        yield* store.settle("r", {
          published: [],
          retry: [],
          failed: [{ id: a1!, error: "poison" }],
          released: [a2!, a3!]
        })
        assert.deepStrictEqual(
          ids(yield* claimSome(time, store, { relayId: "r", batchSize: 10, lease, ordering: "per-key" })),
          [a2!, a3!]
        )
      })))

    test("crash-loop guard: an event whose publish keeps dying is failed after maxCrashes, with the reason", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const [poison] = yield* seed(1)
        const short = Duration.millis(150)
        yield* store.claim({ relayId: "dies-1", batchSize: 10, lease: short })
        yield* time.advance("250 millis")
        assert.deepStrictEqual(yield* store.reclaimExpired({ maxCrashes: 2 }), { suspect: 1, failed: 0 })
        const suspect = yield* store.claimSuspect({ relayId: "dies-2", lease: short })
        assert.strictEqual(suspect?.message.id, poison!)
        yield* time.advance("250 millis")
        assert.deepStrictEqual(yield* store.reclaimExpired({ maxCrashes: 2 }), { suspect: 0, failed: 1 })
        const failed = yield* store.listFailed({ limit: 10 })
        assert.strictEqual(failed[0]?.message.id, poison!)
        assert.match(failed[0]?.lastError ?? "", /crash loop: 2 publish attempts started and none finished/)
        // a publish that finishes (even failing) is not a crash
        assert.strictEqual(yield* store.retryFailed(), 1)
        yield* store.claim({ relayId: "r", batchSize: 1, lease: short })
        yield* store.settle("r", {
          published: [],
          retry: [{ id: poison!, delay: Duration.zero, error: "nack" }],
          failed: []
        })
        yield* store.claim({ relayId: "r", batchSize: 1, lease: short })
        yield* time.advance("250 millis")
        assert.deepStrictEqual(yield* store.reclaimExpired({ maxCrashes: 2 }), { suspect: 1, failed: 0 })
      })))

    adminViewTests(run)

    test("retention prunes old published rows in bounded batches and nothing else", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        yield* seed(5)
        const claimed = yield* store.claim({ relayId: "r", batchSize: 4, lease })
        yield* store.settle("r", { published: ids(claimed), retry: [], failed: [] })
        assert.strictEqual(yield* store.prune({ olderThan: Duration.hours(1), limit: 10 }), 0)
        yield* time.advance("50 millis")
        assert.strictEqual(yield* store.prune({ olderThan: Duration.millis(10), limit: 3 }), 3)
        assert.strictEqual(yield* store.prune({ olderThan: Duration.millis(10), limit: 3 }), 1)
        const stats = yield* store.stats
        assert.deepStrictEqual([stats.published, stats.pending], [0, 1])
        assert.isNotNull(stats.oldestPendingAgeMs)
      })))
    test("the store says when the current fiber is in one of its transactions, whose after-commit work waits for the commit", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        assert.isFalse(yield* store.inTransaction)
        assert.isFalse(yield* store.defersAfterCommit)
        let ran = false
        const inside = yield* store.withTransaction(Effect.gen(function*() {
          const facts = [yield* store.inTransaction, yield* store.defersAfterCommit]
          yield* store.afterCommit(Effect.sync(() => void (ran = true)))
          return [...facts, ran]
        }))
        assert.deepStrictEqual(inside, [true, true, false], "in a transaction, deferring, and the hook had not run yet")
        assert.isTrue(ran, "the hook ran after the commit")
      })))

    test("release takes back the claim's attempt: the next claim counts the same attempt again; a released suspect stays a suspect", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const [a, b] = yield* seed(2)
        for (let i = 0; i < 3; i++) {
          const claimed = yield* store.claim({ relayId: `r${i}`, batchSize: 10, lease })
          assert.deepStrictEqual(
            claimed.map((c) => c.attempts),
            [1, 1],
            `claim ${i + 1}: released claims counted nothing`
          )
          assert.strictEqual(yield* store.release(`r${i}`, ids(claimed)), 2)
        }
        // a crashed attempt stays counted: b becomes a suspect; released, it stays one
        yield* store.claim({ relayId: "dies", batchSize: 10, lease: Duration.millis(100) })
        yield* time.advance("200 millis")
        assert.deepStrictEqual(yield* store.reclaimExpired({ maxCrashes: 3 }), { suspect: 2, failed: 0 })
        const suspect = yield* store.claimSuspect({ relayId: "r", lease })
        assert.strictEqual(suspect?.message.id, a!)
        assert.strictEqual(suspect?.attempts, 2)
        assert.strictEqual(yield* store.release("r", [a!]), 1)
        const stats = yield* store.stats
        assert.deepStrictEqual([stats.suspect, stats.pending, stats.processing], [2, 0, 0])
        assert.deepStrictEqual(
          yield* store.claim({ relayId: "r", batchSize: 10, lease }),
          [],
          "suspects are not claimed in batches"
        )
        const again = yield* store.claimSuspect({ relayId: "r", lease })
        assert.strictEqual(again?.message.id, a!)
        assert.strictEqual(again?.attempts, 2, "the released claim was not counted")
        assert.strictEqual((yield* store.claimSuspect({ relayId: "r", lease }))?.message.id, b!)
      })))

    test("claimSuspect: unordered takes a suspect even behind an earlier unsettled event of its key; per-key does not", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const [first, second] = (yield* store.withTransaction(Outbox.appendAll([draft(1, "K"), draft(2, "K")]))).map((
          m
        ) => m.id)
        // first: retried later (pending, not due); second: its relay died (suspect)
        yield* store.claim({ relayId: "a", batchSize: 1, lease })
        yield* store.claim({ relayId: "dies", batchSize: 1, lease: Duration.millis(100) })
        yield* store.settle("a", {
          published: [],
          retry: [{ id: first!, delay: Duration.hours(1), error: "nack" }],
          failed: []
        })
        yield* time.advance("200 millis")
        assert.deepStrictEqual(yield* store.reclaimExpired({ maxCrashes: 3 }), { suspect: 1, failed: 0 })
        assert.isUndefined(
          yield* store.claimSuspect({ relayId: "r", lease, ordering: "per-key" }),
          "per key, it waits behind the first"
        )
        const unordered = yield* store.claimSuspect({ relayId: "r", lease, ordering: "unordered" })
        assert.strictEqual(unordered?.message.id, second!)
      })))
  })
}
