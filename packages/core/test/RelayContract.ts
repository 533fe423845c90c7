/**
 * Relay behaviour on any store: the memory store here, Postgres in `@tidings/postgres`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Layer, Metric, Schedule, Scope, Semaphore } from "effect"
import { PublishError, Refused, StoreError, Unavailable } from "../src/Errors.ts"
import * as MemoryBroker from "../src/MemoryBroker.ts"
import type { Message } from "../src/Message.ts"
import * as Metrics from "../src/Metrics.ts"
import * as Outbox from "../src/Outbox.ts"
import { type AppendClaim, OutboxStore, type Service } from "../src/OutboxStore.ts"
import { Publisher } from "../src/Publisher.ts"
import * as Relay from "../src/Relay.ts"
import { seed, Thing } from "./OutboxStoreContract.ts"

/** Polls `check` every 20 ms until it returns true, failing after `timeout`. */
export const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, timeout: Duration.Input = "10 seconds", what = "condition") =>
  check.pipe(
    Effect.flatMap((ok) => ok ? Effect.void : Effect.fail("not yet" as const)),
    Effect.retry(Schedule.spaced("20 millis")),
    Effect.timeoutOrElse({ duration: timeout, orElse: () => Effect.die(new Error(`timed out waiting for ${what}`)) })
  )

/** Starts a relay in its own scope; returns a function that shuts it down. */
export const startRelay = (config: Relay.Config) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(Relay.layer(config), scope)
    return { relay: context, stop: Scope.close(scope, Exit.void) }
  })

/** A publisher that takes `delay` per batch, then hands over to the memory broker. */
export const slowPublisher = (delay: Duration.Input) =>
  Layer.effect(Publisher, Effect.gen(function*() {
    const inner = yield* Publisher
    return Publisher.of({ publish: (messages) => Effect.andThen(Effect.sleep(delay), inner.publish(messages)) })
  }))

const quiet: Relay.Config = { statsInterval: false, retention: false, pollInterval: { base: "20 millis", max: "100 millis" } }

/** Wraps a store, counting events that came back from claims and recording append claims. */
const spyStore = (inner: Service) => {
  let claimed = 0
  const appendClaims: Array<AppendClaim | undefined> = []
  const count = <A, E>(effect: Effect.Effect<ReadonlyArray<A>, E>) => Effect.tap(effect, (got) => Effect.sync(() => void (claimed += got.length)))
  let atOnce = false
  const store: Service = {
    ...inner,
    afterCommit: (effect) => atOnce ? effect : inner.afterCommit(effect),
    append: (messages, claim) => Effect.andThen(Effect.sync(() => void appendClaims.push(claim)), inner.append(messages, claim)),
    claim: (options) => count(inner.claim(options)),
    settleAndClaim: (relayId, settlement, next) => count(inner.settleAndClaim(relayId, settlement, next))
  }
  return {
    store,
    claimed: () => claimed,
    appendClaims: () => appendClaims,
    /** Makes `afterCommit` run hooks at once, as a transaction the store did not start would. */
    runHooksAtOnce: (on: boolean) => void (atOnce = on)
  }
}

/** Registers the relay suite for a store built fresh for each test. */
export const relayContract = (name: string, makeStore: Effect.Effect<Service, unknown, Scope.Scope>) => {
  const run = <A, E>(
    body: Effect.Effect<A, E, OutboxStore | MemoryBroker.MemoryBroker | Publisher | Scope.Scope>,
    broker: MemoryBroker.Options = {}
  ) =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* makeStore
      return yield* body.pipe(Effect.provide(Layer.mergeAll(Layer.succeed(OutboxStore, store), MemoryBroker.layer(broker))))
    }))

  const deliveredIds = Effect.map(MemoryBroker.MemoryBroker.use((b) => b.delivered), (ds) => ds.map((d) => d.message.id))
  /** The broker received exactly `ids`, each once (in any order). */
  const assertDeliveredOnce = (ids: ReadonlyArray<string>) =>
    Effect.map(deliveredIds, (delivered) => assert.deepStrictEqual([...delivered].sort(), [...ids].sort()))

  describe(`Relay: ${name}`, () => {
    it.live("4 pollers publish 2,000 events exactly once", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const ids: Array<string> = []
        for (let i = 0; i < 4; i++) ids.push(...(yield* seed(500, i * 500)))
        const { stop } = yield* startRelay({ ...quiet, concurrency: 4, batchSize: 50 })
        yield* eventually(Effect.map(deliveredIds, (d) => d.length >= 2000), "30 seconds", "2,000 deliveries")
        yield* stop
        const delivered = yield* deliveredIds
        assert.strictEqual(delivered.length, 2000)
        assert.strictEqual(new Set(delivered).size, 2000)
        assert.deepStrictEqual([...delivered].sort(), [...ids].sort())
        const stats = yield* store.stats
        assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [2000, 0, 0])
      })))

    it.live("an idle relay is woken by a committed append, long before its poll interval", () =>
      run(Effect.gen(function*() {
        const { stop } = yield* startRelay({ ...quiet, dispatch: "poll", pollInterval: { base: "5 seconds", max: "5 seconds" } })
        yield* Effect.sleep("100 millis") // the relay has polled once and is now idle
        const start = Date.now()
        yield* seed(1)
        yield* eventually(Effect.map(deliveredIds, (d) => d.length === 1), "3 seconds", "the woken relay")
        const elapsed = Date.now() - start
        yield* stop
        assert.isBelow(elapsed, 1000, `woke after ${elapsed} ms; the poll interval is 5 s`)
      })))

    it.live("eager dispatch: events appended in the relay's process go out without a claim; a rollback sends nothing", () =>
      run(Effect.gen(function*() {
        const inner = yield* OutboxStore
        const spy = spyStore(inner)
        yield* Effect.gen(function*() {
          const store = yield* OutboxStore
          // room for every event at once (concurrency × batchSize): the overflow is the next test's
          const { stop } = yield* startRelay({ ...quiet, concurrency: 2, batchSize: 50, pollInterval: { base: "5 seconds", max: "5 seconds" } })
          yield* Effect.sleep("50 millis") // the pollers have polled once and are idle
          const start = Date.now()
          const ids = (yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => i), (i) => seed(1 + (i % 3), i * 3), { concurrency: 4 })).flat()
          yield* Effect.exit(store.withTransaction(Effect.andThen(
            Outbox.append(Thing, { aggregateId: "x", payload: { n: 1, label: "rolled back" } }),
            Effect.fail("abort")
          )))
          yield* eventually(Effect.map(deliveredIds, (d) => d.length >= ids.length), "5 seconds", "the eager events")
          const elapsed = Date.now() - start
          yield* Effect.sleep("100 millis")
          yield* stop
          yield* assertDeliveredOnce(ids)
          assert.isBelow(elapsed, 2000, `published after ${elapsed} ms; the poll interval is 5 s`)
          assert.strictEqual(spy.claimed(), 0, "no event went through a claim")
          assert.isTrue(spy.appendClaims().every((c) => c !== undefined && /-eager$/.test(c.relayId)))
          const stats = yield* store.stats
          assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [ids.length, 0, 0])
        }).pipe(Effect.provideService(OutboxStore, spy.store))
      })))

    it.live("eager dispatch: the overflow, a shutdown before the commit, and a deferred-less transaction fall back to claims", () =>
      run(Effect.gen(function*() {
        const inner = yield* OutboxStore
        const spy = spyStore(inner)
        yield* Effect.gen(function*() {
          const store = yield* OutboxStore
          const first = yield* startRelay({ ...quiet, concurrency: 1, batchSize: 2, pollInterval: { base: "20 millis", max: "20 millis" } })
          // more than concurrency × batchSize in one transaction: written pending, claimed
          const big = yield* seed(3)
          yield* eventually(Effect.map(deliveredIds, (d) => d.length === 3), "5 seconds", "the overflow")
          assert.strictEqual(spy.claimed(), 3)
          assert.isUndefined(spy.appendClaims().at(-1))
          // two appends of two in one transaction: each fit when it was made, together they do not;
          // what does not fit at the commit goes back to pending and is claimed
          const pair = yield* store.withTransaction(Effect.zipWith(
            Outbox.appendAll([0, 1].map((i) => Thing.make({ aggregateId: "p", payload: { n: i, label: "pair" } }))),
            Outbox.appendAll([2, 3].map((i) => Thing.make({ aggregateId: "p", payload: { n: i, label: "pair" } }))),
            (a, b) => [...a, ...b].map((m) => m.id)
          ))
          assert.isTrue(spy.appendClaims().slice(-2).every((c) => c !== undefined))
          yield* eventually(Effect.map(deliveredIds, (d) => d.length === 7), "5 seconds", "the pair")
          assert.strictEqual(spy.claimed(), 5, "the two that did not fit were claimed")
          // the relay stops between the append (written claimed for it) and the commit
          const late = yield* store.withTransaction(Effect.gen(function*() {
            const m = yield* Outbox.append(Thing, { aggregateId: "late", payload: { n: 9, label: "late" } })
            yield* first.stop
            return m
          }))
          assert.match(spy.appendClaims().at(-1)?.relayId ?? "", /-eager$/)
          yield* eventually(Effect.map(store.stats, (st) => st.pending === 1), "5 seconds", "the late event back to pending")
          // a transaction that runs after-commit hooks at once (not one the store started) is not trusted with eager dispatch
          const second = yield* startRelay({ ...quiet, concurrency: 1, batchSize: 2, pollInterval: { base: "20 millis", max: "20 millis" } })
          spy.runHooksAtOnce(true)
          const [plain] = yield* seed(1)
          spy.runHooksAtOnce(false)
          assert.isUndefined(spy.appendClaims().at(-1))
          yield* eventually(Effect.map(deliveredIds, (d) => d.length === 9), "5 seconds", "the late and plain events")
          yield* second.stop
          const delivered = yield* deliveredIds
          assert.deepStrictEqual([...delivered].sort(), [...big, ...pair, late.id, plain!].sort())
          assert.strictEqual(spy.claimed(), 7)
        }).pipe(Effect.provideService(OutboxStore, spy.store))
      })))

    it.live("a rolled-back transaction publishes nothing", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const { stop } = yield* startRelay(quiet)
        yield* Effect.exit(store.withTransaction(Effect.andThen(
          Outbox.append(Thing, { aggregateId: "x", payload: { n: 1, label: "rolled back" } }),
          Effect.fail("abort")
        )))
        const [kept] = yield* seed(1)
        yield* eventually(Effect.map(deliveredIds, (d) => d.length === 1), "5 seconds", "the committed event")
        yield* Effect.sleep("200 millis")
        yield* stop
        assert.deepStrictEqual(yield* deliveredIds, [kept!])
      })))

    it.live("failed publishes back off per the schedule, then succeed", () => {
      const attempts: Array<number> = []
      let failures = 3
      const fault = (_: Message) => {
        attempts.push(Date.now())
        return failures-- > 0 ? new PublishError({ message: "broker unavailable", reason: new Refused({ retryable: true }) }) : undefined
      }
      return run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const [id] = yield* seed(1)
        const { stop } = yield* startRelay({
          ...quiet,
          retry: Retry.exponential("150 millis"),
          maxAttempts: 10,
          pollInterval: { base: "10 millis", max: "20 millis" }
        })
        yield* eventually(Effect.map(deliveredIds, (d) => d.length === 1), "10 seconds", "the retried event")
        yield* stop
        assert.deepStrictEqual(yield* deliveredIds, [id!])
        assert.strictEqual(attempts.length, 4)
        const gaps = attempts.slice(1).map((t, i) => t - attempts[i]!)
        // exponential 150 ms: 150, 300, 600 (never earlier; a little later is the poll and the clock)
        ;[150, 300, 600].forEach((expected, i) => {
          assert.isAtLeast(gaps[i]!, expected - 15, `gap ${i + 1} was ${gaps[i]} ms, schedule says ${expected}`)
          assert.isBelow(gaps[i]!, expected + 400, `gap ${i + 1} was ${gaps[i]} ms, schedule says ${expected}`)
        })
        assert.strictEqual((yield* store.stats).published, 1)
      }), { fault })
    })

    it.live("an event that keeps failing ends failed after max attempts; a non-retryable error fails it at once", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const failedBefore = (yield* Metric.value(Metrics.failed)).count
        const broker = yield* MemoryBroker.MemoryBroker
        const tries = new Map<string, number>()
        yield* broker.setFault((m) => {
          tries.set(m.id, (tries.get(m.id) ?? 0) + 1)
          const label = (m.payload as { label: string }).label
          if (label === "#0") return new PublishError({ message: "temporarily down", reason: new Refused({ retryable: true }) })
          if (label === "#1") return new PublishError({ message: "message too large", reason: new Refused({ retryable: false }) })
          return undefined
        })
        const [flaky, poison, fine] = yield* seed(3)
        const { stop } = yield* startRelay({
          ...quiet,
          retry: Schedule.spaced("20 millis"),
          maxAttempts: 3,
          pollInterval: { base: "10 millis", max: "20 millis" }
        })
        yield* eventually(Effect.map(store.stats, (s) => s.failed === 2 && s.published === 1), "10 seconds", "2 failed + 1 published")
        yield* stop
        assert.strictEqual(tries.get(flaky!), 3)
        assert.strictEqual(tries.get(poison!), 1)
        assert.strictEqual(tries.get(fine!), 1)
        const failed = yield* store.listFailed({ limit: 10 })
        const errors = new Map(failed.map((f) => [f.message.id, f.lastError ?? ""]))
        assert.match(errors.get(flaky!)!, /temporarily down; gave up after 3 attempts/)
        assert.match(errors.get(poison!)!, /message too large \(not retryable\)/)
        assert.strictEqual((yield* Metric.value(Metrics.failed)).count - failedBefore, 2)
        // replay from the dead-letter state once the broker accepts again
        yield* broker.setFault(undefined)
        assert.strictEqual(yield* store.retryFailed(), 2)
        const again = yield* startRelay({ ...quiet, pollInterval: { base: "10 millis", max: "20 millis" } })
        yield* eventually(Effect.map(store.stats, (s) => s.published === 3), "5 seconds", "replayed events")
        yield* again.stop
      })))

    it.live("per-key: each key's events are published in append order despite publish failures and a crashed relay", () => {
      const keys = 12
      const perKey = new Array<number>(keys).fill(0)
      let random = 42
      const rand = () => (random = (random * 1103515245 + 12345) % 2147483648) / 2147483648
      const fault = () => rand() < 0.2 ? new PublishError({ message: "random nack", reason: new Refused({ retryable: true }) }) : undefined
      return run(Effect.gen(function*() {
        const store = yield* OutboxStore
        // Producers append one or two events per transaction; a key's transactions are serialized, so
        // its append order is the order of `n`.
        const locks = yield* Effect.forEach(Array.from({ length: keys }), () => Semaphore.make(1))
        const produce = (producer: number) =>
          Effect.forEach(Array.from({ length: 25 }), (_, i) => {
            const k = (producer * 7 + i * 5) % keys
            return locks[k]!.withPermits(1)(store.withTransaction(Effect.suspend(() => {
              const count = i % 2 === 0 ? 2 : 1
              const drafts = Array.from({ length: count }, () => Thing.make({ aggregateId: `key-${k}`, payload: { n: perKey[k]!++, label: `p${producer}` } }))
              return Outbox.appendAll(drafts)
            })))
          }, { discard: true })
        const relays = yield* startRelay({
          ...quiet,
          ordering: "per-key",
          concurrency: 4,
          batchSize: 10,
          retry: Schedule.spaced("10 millis"),
          maxAttempts: 100,
          lease: "2 seconds",
          reclaimInterval: "100 millis"
        })
        yield* Effect.forEach([0, 1, 2, 3, 4, 5, 6, 7], produce, { concurrency: "unbounded", discard: true })
        // A relay that claims and dies: its claims expire and are recovered without breaking the order.
        yield* store.claim({ relayId: "crashed", batchSize: 5, lease: Duration.millis(300), ordering: "per-key" })
        const total = perKey.reduce((a, b) => a + b, 0)
        yield* eventually(Effect.map(store.stats, (st) => st.published === total), "30 seconds", `${total} published`)
        yield* relays.stop
        const delivered = yield* MemoryBroker.MemoryBroker.use((b) => b.delivered)
        const seen = new Map<string, Array<number>>()
        for (const { message } of delivered) {
          const list = seen.get(message.orderingKey) ?? []
          list.push((message.payload as { n: number }).n)
          seen.set(message.orderingKey, list)
        }
        for (let k = 0; k < keys; k++) {
          assert.deepStrictEqual(seen.get(`key-${k}`) ?? [], Array.from({ length: perKey[k]! }, (_, i) => i), `order of key-${k}`)
        }
      }), { fault })
    })

    it.live("eager dispatch with backpressure: a producer waits after its commit for the relay, at most as long as allowed; shutdown publishes what was handed over", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const one = (n: number) => store.withTransaction(Outbox.append(Thing, { aggregateId: "bp", payload: { n, label: "bp" } }))
        const count = Effect.map(deliveredIds, (d) => d.length)
        const slow = yield* startRelay({ ...quiet, concurrency: 1, batchSize: 1, eagerLimit: 2, backpressure: "5 seconds" }).pipe(
          Effect.provide(slowPublisher("150 millis"))
        )
        yield* one(0) // room left after it: returns at once
        assert.strictEqual(yield* count, 0)
        yield* one(1) // fills the relay: returns once the first is out
        assert.isAtLeast(yield* count, 1)
        yield* slow.stop
        assert.strictEqual(yield* count, 2)
        const slower = yield* startRelay({ ...quiet, concurrency: 1, batchSize: 1, eagerLimit: 2, backpressure: "30 millis" }).pipe(
          Effect.provide(slowPublisher("500 millis"))
        )
        yield* one(2)
        yield* one(3) // waits 30 ms at most, then goes on: its event stays handed over
        assert.strictEqual(yield* count, 2)
        yield* slower.stop // publishes both before it returns
        assert.strictEqual(yield* count, 4)
        const stats = yield* store.stats
        assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [4, 0, 0])
      })))

    it.live("merged claims: waiting pollers share a claim statement, each still publishes one batch at a time; without merging, one claim per poller", () =>
      run(Effect.gen(function*() {
        const inner = yield* OutboxStore
        const claims: Array<{ readonly relayId: string; readonly batchSize: number }> = []
        // A statement that takes a few milliseconds (as on a real database), so that pollers queue up.
        const slow = <A, E>(effect: Effect.Effect<A, E>) => Effect.andThen(Effect.sleep("3 millis"), effect)
        const store: Service = {
          ...inner,
          claim: (options) => Effect.andThen(Effect.sync(() => void claims.push(options)), slow(inner.claim(options))),
          settleAndClaim: (relayId, settlement, next) =>
            Effect.andThen(Effect.sync(() => void claims.push(next)), slow(inner.settleAndClaim(relayId, settlement, next)))
        }
        const batches: Array<number> = []
        const counting = Layer.effect(Publisher, Effect.gen(function*() {
          const broker = yield* Publisher
          return Publisher.of({ publish: (messages) => Effect.andThen(Effect.sync(() => void batches.push(messages.length)), broker.publish(messages)) })
        }))
        const drain = (config: Relay.Config, n: number, offset: number) =>
          Effect.gen(function*() {
            claims.length = 0
            batches.length = 0
            const before = (yield* deliveredIds).length
            yield* seed(n, offset)
            const { stop } = yield* startRelay({ ...quiet, dispatch: "poll", concurrency: 8, batchSize: 5, ...config }).pipe(
              Effect.provide(counting),
              Effect.provideService(OutboxStore, store)
            )
            yield* eventually(Effect.map(deliveredIds, (d) => d.length >= before + n), "20 seconds", `${n} deliveries`)
            yield* stop
          })

        yield* drain({}, 400, 0)
        assert.isAbove(Math.max(...claims.map((c) => c.batchSize)), 5, "some claim statements served several pollers")
        assert.isAtMost(Math.max(...batches), 5, "publish batches stay at batchSize")
        assert.isTrue(claims.every((c) => c.relayId.endsWith("-claims")), "merged claims are held by the group's claimer")

        yield* drain({ coalesceClaims: false }, 200, 400)
        assert.deepStrictEqual([...new Set(claims.map((c) => c.batchSize))], [5])
        assert.strictEqual(new Set(claims.map((c) => c.relayId)).size, 8, "one holder per poller")

        const delivered = yield* deliveredIds
        assert.strictEqual(delivered.length, 600)
        assert.strictEqual(new Set(delivered).size, 600, "every event once")
        const stats = yield* inner.stats
        assert.deepStrictEqual([stats.published, stats.pending, stats.processing], [600, 0, 0])
      })))

    it.live("merged claims: a failed shared statement fails every poller in it; their events are still published once", () =>
      run(Effect.gen(function*() {
        const inner = yield* OutboxStore
        let failures = 0
        const store: Service = {
          ...inner,
          // The first two merged settle-and-claims fail before they touch the store (a dropped connection).
          settleAndClaim: (relayId, settlement, next) =>
            Effect.suspend(() =>
              next.batchSize > 5 && failures < 2
                ? (failures++, Effect.fail(new StoreError({ operation: "settleAndClaim", message: "connection reset", reason: new Unavailable() })))
                : Effect.andThen(Effect.sleep("2 millis"), inner.settleAndClaim(relayId, settlement, next))
            )
        }
        const ids = yield* seed(200)
        const { stop } = yield* startRelay({ ...quiet, dispatch: "poll", concurrency: 8, batchSize: 5 }).pipe(Effect.provideService(OutboxStore, store))
        yield* eventually(Effect.map(inner.stats, (s) => s.published === 200), "20 seconds", "200 published")
        yield* stop
        assert.strictEqual(failures, 2)
        // the pollers retried their settles: nothing waited for a lease, nothing went out twice
        yield* assertDeliveredOnce(ids)
      })))

    it.live("merged claims: shutdown leaves no claim behind, whether the batches finish or are interrupted and released", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const ids = yield* seed(100)
        // in time: the in-flight batches finish and are settled
        const calm = yield* startRelay({ ...quiet, dispatch: "poll", concurrency: 4, batchSize: 5 }).pipe(Effect.provide(slowPublisher("100 millis")))
        yield* eventually(Effect.map(store.stats, (s) => s.processing > 0), "5 seconds", "batches in flight")
        yield* calm.stop
        let stats = yield* store.stats
        assert.strictEqual(stats.processing, 0, "no claim is left behind")
        assert.isAtLeast(stats.published, 5, "the batches in flight completed")
        assert.strictEqual(stats.published + stats.pending, 100)
        const published = stats.published
        assert.isAtLeast(stats.pending, 20, "work is left for the interrupted relay")
        // past the deadline: the publishes are interrupted and the claims released under the group's holder
        const stuck = yield* startRelay({ ...quiet, dispatch: "poll", concurrency: 4, batchSize: 5, shutdownTimeout: "50 millis", publishTimeout: "20 seconds" }).pipe(
          Effect.provide(slowPublisher("10 seconds"))
        )
        yield* eventually(Effect.map(store.stats, (s) => s.processing === 20), "5 seconds", "the four pollers holding a batch each")
        yield* stuck.stop
        stats = yield* store.stats
        assert.deepStrictEqual([stats.pending, stats.processing, stats.published], [100 - published, 0, published])
        const again = yield* startRelay({ ...quiet, concurrency: 4, batchSize: 5 })
        yield* eventually(Effect.map(store.stats, (s) => s.published === 100), "5 seconds", "the rest")
        yield* again.stop
        yield* assertDeliveredOnce(ids)
      })))

    it.live("shutdown waits for the in-flight batch and loses nothing", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const ids = yield* seed(30)
        const { stop } = yield* startRelay({ ...quiet, batchSize: 10 }).pipe(Effect.provide(slowPublisher("300 millis")))
        yield* Effect.sleep("150 millis") // first batch is being published
        yield* stop
        const stats = yield* store.stats
        assert.strictEqual(stats.processing, 0, "no claim is left behind")
        assert.strictEqual(stats.published + stats.pending, 30)
        assert.isAtLeast(stats.published, 10, "the in-flight batch completed")
        const again = yield* startRelay(quiet)
        yield* eventually(Effect.map(store.stats, (s) => s.published === 30), "5 seconds", "the rest")
        yield* again.stop
        yield* assertDeliveredOnce(ids)
      })))

    it.live("shutdown past its deadline interrupts the publish and releases the claims", () =>
      run(Effect.gen(function*() {
        const store = yield* OutboxStore
        const ids = yield* seed(10)
        const { stop } = yield* startRelay({ ...quiet, batchSize: 10, shutdownTimeout: "50 millis", publishTimeout: "20 seconds" }).pipe(
          Effect.provide(slowPublisher("10 seconds"))
        )
        yield* Effect.sleep("150 millis")
        const t0 = Date.now()
        yield* stop
        assert.isBelow(Date.now() - t0, 2000)
        const stats = yield* store.stats
        assert.deepStrictEqual([stats.pending, stats.processing, stats.published], [10, 0, 0])
        // released, not counted: the next claim is attempt 1 again
        const claimed = yield* store.claim({ relayId: "check", batchSize: 10, lease: Duration.seconds(30) })
        assert.deepStrictEqual(claimed.map((c) => c.attempts), Array(10).fill(1))
        assert.deepStrictEqual(claimed.map((c) => c.message.id).sort(), [...ids].sort())
      })))
  })
}

const Retry = {
  exponential: (base: Duration.Input) => Schedule.exponential(base, 2)
}
