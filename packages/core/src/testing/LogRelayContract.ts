/**
 * The contract every log store passes with the log relay (`MemoryLogStore` in core, `PgLogStore` in
 * `@tidings/postgres`): order per partition under concurrent producers, a late-committing
 * transaction, failures and the failed table, outages, crash loops, fencing, rebalancing,
 * retention. Run it against your own driver.
 *
 * @example
 * import { logRelayContract } from "@tidings/core/testing"
 * logRelayContract("my driver", MyLogStore.make({ ... }))
 * @since 0.1.0
 * @module
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Metric, type Scope } from "effect"
import { PublishError, Refused, StoreError, Unavailable } from "../Errors.ts"
import {
  appendOne,
  clockOps,
  countOf,
  delivered,
  type Env,
  logOrder,
  type LogStores,
  nOf,
  startRelay,
  Tick,
  withLog
} from "../internal/logContractSupport.ts"
import * as LogRelay from "../LogRelay.ts"
import * as LogStore from "../LogStore.ts"
import * as MemoryBroker from "../MemoryBroker.ts"
import * as Metrics from "../Metrics.ts"
import * as Outbox from "../Outbox.ts"
import { OutboxStore } from "../OutboxStore.ts"
import { Publisher } from "../Publisher.ts"
import { groupTests } from "./log/relayGroups.ts"

/**
 * Options of the log contracts.
 * @since 0.1.0
 * @category models
 */
export interface LogContractOptions {
  /** `"test"`: the store reads Effect's `Clock` (the suite runs on `TestClock`); `"live"` (default): its own clock. */
  readonly clock?: "live" | "test"
}

/**
 * Registers the log relay suite for stores built fresh for each test by `makeStores`.
 * @since 0.1.0
 * @category contracts
 */
export const logRelayContract = (
  name: string,
  makeStores: Effect.Effect<LogStores, unknown, Scope.Scope>,
  options: LogContractOptions = {}
): void => {
  const onTestClock = options.clock === "test"
  const test = onTestClock ? it.effect : it.live
  const { passTime, waitFor } = clockOps(onTestClock)
  const run = <A, E>(body: Effect.Effect<A, E, Env>, broker: MemoryBroker.Options = {}) =>
    withLog(makeStores, body, broker)
  const ids = (ms: ReadonlyArray<{ readonly id: string }>) => ms.map((m) => m.id)

  describe(`log relay: ${name}`, () => {
    test(
      "publishes every event of concurrent producers once, each partition in log order",
      () =>
        run(Effect.gen(function*() {
          const { stop } = yield* startRelay({ group: "order" })
          const appended: Array<string> = []
          yield* Effect.forEach(Array.from({ length: 6 }, (_, p) => p), (p) =>
            Effect.gen(function*() {
              for (let i = 0; i < 25; i++) {
                const store = yield* OutboxStore
                const written = yield* store.withTransaction(Outbox.appendAll([
                  Tick.make({ aggregateId: `p${p}-k${i % 4}`, payload: { n: i } }),
                  ...(i % 3 === 0 ? [Tick.make({ aggregateId: `p${p}-k${(i + 1) % 4}`, payload: { n: i } })] : [])
                ]))
                appended.push(...ids(written))
              }
            }), { concurrency: "unbounded", discard: true })
          yield* waitFor("every event published", Effect.map(delivered, (d) => d.length >= appended.length))
          yield* stop
          const out = yield* delivered
          assert.strictEqual(out.length, appended.length, "no event twice")
          assert.deepStrictEqual(new Set(ids(out)), new Set(appended))
          // Per key, n never goes back; per partition, exactly the log's order.
          const lastN = new Map<string, number>()
          for (const m of out) {
            assert.isAtLeast(nOf(m), lastN.get(m.orderingKey) ?? -1, `order of ${m.orderingKey}`)
            lastN.set(m.orderingKey, nOf(m))
          }
          const store = yield* LogStore.LogStore
          const order = yield* logOrder
          for (const [partition, logged] of order) {
            const published = ids(
              out.filter((m) => LogStore.partitionOf(m.orderingKey, store.partitions) === partition)
            )
            assert.deepStrictEqual(published, logged, `partition ${partition}`)
          }
        })),
      60_000
    )

    test("a transaction that commits late is published in its place, not skipped", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const { stop } = yield* startRelay({ group: "late" })
        const release = yield* Deferred.make<void>()
        const opened = yield* Deferred.make<void>()
        // The early transaction appends first (an older transaction id) and commits last.
        const early = yield* Effect.forkChild(store.withTransaction(Effect.gen(function*() {
          yield* Outbox.append(Tick, { aggregateId: "late-key", payload: { n: 1 } })
          yield* Deferred.succeed(opened, undefined)
          yield* Deferred.await(release)
        })))
        yield* Deferred.await(opened)
        const heldBefore = yield* countOf(Metrics.log.heldBack, "late")
        yield* appendOne("late-key", 2)
        yield* appendOne("other-key", 3)
        // The relay read the later events' partition and was held back by the open transaction.
        yield* waitFor("a read held back", Effect.map(countOf(Metrics.log.heldBack, "late"), (n) => n > heldBefore))
        assert.notInclude((yield* delivered).map(nOf), 2, "not before the earlier transaction commits")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(early)
        yield* waitFor(
          "both published",
          Effect.map(delivered, (d) => d.filter((m) => m.orderingKey === "late-key").length === 2)
        )
        yield* stop
        assert.deepStrictEqual((yield* delivered).filter((m) => m.orderingKey === "late-key").map(nOf), [1, 2])
      })), 60_000)

    test(
      "an open transaction that holds the log back shows in the gauge and the readiness check, with its age",
      () =>
        run(Effect.gen(function*() {
          const store = yield* OutboxStore
          const release = yield* Deferred.make<void>()
          const opened = yield* Deferred.make<void>()
          const open = yield* Effect.forkChild(store.withTransaction(Effect.gen(function*() {
            yield* Outbox.append(Tick, { aggregateId: "slow", payload: { n: 1 } })
            yield* Deferred.succeed(opened, undefined)
            yield* Deferred.await(release)
          })))
          yield* Deferred.await(opened)
          const { relay, stop } = yield* startRelay({ group: "horizon", statsInterval: "50 millis" })
          yield* waitFor("the relay runs", relay.isRunning)
          const check = LogRelay.readiness({ maxHeldBack: "300 millis" }).run.pipe(
            Effect.provideService(LogRelay.LogRelay, relay),
            Effect.exit
          )
          yield* waitFor("the readiness check to report it", Effect.map(check, Exit.isFailure))
          const down = yield* check
          assert.isTrue(Exit.isFailure(down))
          assert.match(String(down), /held back by a transaction open for \d+\.\d s/)
          yield* waitFor(
            "the gauge",
            Effect.map(Metric.value(Metrics.log.oldestOpenTransactionAge), (g) => g.value >= 0.3)
          )
          yield* Deferred.succeed(release, undefined)
          yield* Fiber.join(open)
          yield* waitFor("published once it committed", Effect.map(delivered, (d) => d.length === 1))
          const up = LogRelay.readiness({ maxHeldBack: "1 minute" }).run.pipe(
            Effect.provideService(LogRelay.LogRelay, relay),
            Effect.exit
          )
          assert.isTrue(Exit.isSuccess(yield* up))
          yield* stop
        })),
      60_000
    )

    test(
      "a failing head is retried in order; a refused event goes to the failed table; the cursor moves on",
      () =>
        run(Effect.gen(function*() {
          const broker = yield* MemoryBroker.MemoryBroker
          let refusals = 0
          yield* broker.setFault((m) => {
            if (m.orderingKey === "flaky" && nOf(m) === 2 && refusals < 2) {
              refusals++
              return new PublishError({ message: "nack", reason: new Refused({ retryable: true }) })
            }
            if (m.orderingKey === "poison" && nOf(m) === 2) {
              return new PublishError({ message: "no route", reason: new Refused({ retryable: false }) })
            }
            return undefined
          })
          for (let n = 1; n <= 4; n++) {
            yield* appendOne("flaky", n)
            yield* appendOne("poison", n)
          }
          const { stop } = yield* startRelay({ group: "fail", maxAttempts: 5 })
          yield* waitFor("the other events", Effect.map(delivered, (d) => d.length === 7))
          const out = yield* delivered
          assert.deepStrictEqual(
            out.filter((m) => m.orderingKey === "flaky").map(nOf),
            [1, 2, 3, 4],
            "the retried head went first"
          )
          assert.deepStrictEqual(
            out.filter((m) => m.orderingKey === "poison").map(nOf),
            [1, 3, 4],
            "the refused one was skipped"
          )
          assert.strictEqual(refusals, 2)
          const store = yield* OutboxStore
          const failed = yield* store.listFailed({ limit: 10 })
          assert.deepStrictEqual(failed.map((f) => [f.message.orderingKey, nOf(f.message)]), [["poison", 2]])
          assert.match(failed[0]!.lastError ?? "", /no route/)
          // The admin views (console, CLI) show it as they show the outbox's failed events.
          const id = failed[0]!.message.id
          assert.deepStrictEqual((yield* store.list({ status: "failed", limit: 10 })).map((e) => e.message.id), [id])
          assert.strictEqual((yield* store.get(id))?.status, "failed")
          assert.deepStrictEqual(yield* store.countByType({ status: "failed" }), [{
            type: failed[0]!.message.type,
            count: 1
          }])
          // Retried: appended to the log again for this group, published once more.
          yield* broker.setFault(undefined)
          assert.strictEqual(
            yield* store.retryFailed([id, out[0]!.id]),
            1,
            "a published event is no failed event to retry"
          )
          yield* waitFor("the retried event", Effect.map(delivered, (d) => d.length === 8))
          // A replay of a published event appends it again for every group.
          assert.strictEqual(yield* store.requeue([out[0]!.id]), 1)
          yield* waitFor("the replayed event", Effect.map(delivered, (d) => d.length === 9))
          yield* stop
          assert.deepStrictEqual((yield* delivered).slice(7).map((m) => m.id), [id, out[0]!.id])
          assert.strictEqual((yield* store.listFailed({ limit: 10 })).length, 0)
        })),
      60_000
    )

    test(
      "an event failing retryably past maxAttempts is failed; a retried one reaches only the group that failed it",
      () =>
        run(Effect.gen(function*() {
          const broker = yield* MemoryBroker.MemoryBroker
          const store = yield* OutboxStore
          yield* appendOne("k", 1)
          yield* appendOne("k", 2)
          const other = yield* startRelay({ group: "other" })
          yield* waitFor("the other group", Effect.map(delivered, (d) => d.length === 2))
          yield* other.stop
          yield* broker.setFault((m) =>
            nOf(m) === 1
              ? new PublishError({ message: "timeout", reason: new Refused({ retryable: true }) })
              : undefined
          )
          const { stop } = yield* startRelay({ group: "tries", maxAttempts: 3 })
          yield* waitFor("the failure", Effect.map(store.listFailed({ limit: 10 }), (f) => f.length === 1))
          yield* waitFor("the next event", Effect.map(delivered, (d) => d.length === 3))
          const [failed] = yield* store.listFailed({ limit: 10 })
          assert.match(failed!.lastError ?? "", /gave up after 3 attempts/)
          assert.strictEqual(failed!.attempts, 3)
          yield* broker.setFault(undefined)
          yield* store.retryFailed()
          yield* waitFor("the retried event", Effect.map(delivered, (d) => d.length === 4))
          // The group that passed it earlier does not get it again.
          const again = yield* startRelay({ group: "other" })
          yield* passTime("300 millis")
          yield* again.stop
          yield* stop
          assert.deepStrictEqual((yield* delivered).map(nOf), [1, 2, 2, 1])
        })),
      60_000
    )

    test("an unavailable broker pauses the partition without counting attempts", () =>
      run(Effect.gen(function*() {
        const inner = yield* Publisher
        let down = true
        const back = yield* Deferred.make<void>()
        let calls = 0
        const flaky = Publisher.of({
          publish: (messages) =>
            Effect.suspend(() => {
              calls++
              return down
                ? Effect.fail(new PublishError({ message: "connection closed", reason: new Unavailable() }))
                : inner.publish(messages)
            }),
          awaitAvailable: Effect.suspend(() => (down ? Deferred.await(back) : Effect.void))
        })
        for (let n = 1; n <= 3; n++) yield* appendOne("k", n)
        const { relay, stop } = yield* startRelay({ group: "outage", maxAttempts: 1 }).pipe(
          Effect.provide(Layer.succeed(Publisher, flaky))
        )
        yield* waitFor("a failed publish", Effect.sync(() => calls > 0))
        yield* passTime("200 millis")
        const log = yield* LogStore.LogStore
        assert.deepStrictEqual((yield* log.groups).find((g) => g.group === "outage")?.retrying, 0, "no attempt counted")
        assert.isTrue(yield* relay.isPaused)
        const notReady = yield* Effect.flip(
          LogRelay.readiness().run.pipe(Effect.provideService(LogRelay.LogRelay, relay))
        )
        assert.match(notReady.message, /paused: the publisher or the database is unavailable/)
        down = false
        yield* Deferred.succeed(back, undefined)
        yield* waitFor("published after the outage", Effect.map(delivered, (d) => d.length === 3))
        yield* waitFor("no longer paused once a batch is done", Effect.map(relay.isPaused, (paused) => !paused))
        yield* stop
        assert.deepStrictEqual((yield* delivered).map(nOf), [1, 2, 3])
        assert.strictEqual((yield* (yield* OutboxStore).listFailed({ limit: 10 })).length, 0)
      })), 60_000)

    test("an unavailable database pauses the relay without counting attempts", () =>
      run(Effect.gen(function*() {
        const log = yield* LogStore.LogStore
        let down = true
        let refused = 0
        const away = <A>(effect: Effect.Effect<A, StoreError>) =>
          Effect.suspend(() => {
            if (!down) return effect
            refused++
            return Effect.fail(
              new StoreError({ operation: "read", message: "connection refused", reason: new Unavailable() })
            )
          })
        const flaky: LogStore.Service = {
          ...log,
          read: (g, m, r) => away(log.read(g, m, r)),
          settle: (g, m, st) => away(log.settle(g, m, st))
        }
        for (let n = 1; n <= 3; n++) yield* appendOne("k", n)
        const { relay, stop } = yield* startRelay({ group: "db-outage", maxAttempts: 1 }).pipe(
          Effect.provide(Layer.succeed(LogStore.LogStore, flaky))
        )
        yield* waitFor("refused reads", Effect.sync(() => refused >= 2))
        yield* waitFor("paused", relay.isPaused)
        down = false
        yield* waitFor("published after the outage", Effect.map(delivered, (d) => d.length === 3))
        yield* stop
        assert.deepStrictEqual((yield* delivered).map(nOf), [1, 2, 3])
        assert.strictEqual((yield* (yield* OutboxStore).listFailed({ limit: 10 })).length, 0, "nothing failed")
        assert.deepStrictEqual(
          (yield* log.groups).find((g) => g.group === "db-outage")?.retrying,
          0,
          "no attempt counted"
        )
      })), 60_000)

    groupTests({ run, test, passTime, waitFor, ids })
  })
}
