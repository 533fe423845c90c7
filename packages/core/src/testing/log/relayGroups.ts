/**
 * Log relay contract, the group part: crash loops, fencing, rebalancing between instances,
 * retention, and where a new group starts.
 * @internal
 */
import { assert, type it } from "@effect/vitest"
import { Duration, Effect, Exit } from "effect"
import {
  appendOne,
  type clockOps,
  delivered,
  type Env,
  logOrder,
  nOf,
  startRelay,
  Tick
} from "../../internal/logContractSupport.ts"
import * as LogStore from "../../LogStore.ts"
import type * as MemoryBroker from "../../MemoryBroker.ts"
import * as Outbox from "../../Outbox.ts"
import { OutboxStore } from "../../OutboxStore.ts"

/**
 * What the log relay suite's parts share.
 * @since 0.1.0
 * @category models
 */
export interface LogRelaySuite {
  readonly run: <A, E>(body: Effect.Effect<A, E, Env>, broker?: MemoryBroker.Options) => Effect.Effect<A, unknown>
  readonly test: typeof it.live
  readonly passTime: ReturnType<typeof clockOps>["passTime"]
  readonly waitFor: ReturnType<typeof clockOps>["waitFor"]
  readonly ids: (ms: ReadonlyArray<{ readonly id: string }>) => ReadonlyArray<string>
}

/**
 * Registers the group part of the log relay contract.
 * @since 0.1.0
 * @category suites
 */
export const groupTests = ({ ids, passTime, run, test, waitFor }: LogRelaySuite): void => {
  test(
    "crash loop: an event whose owners died with it in flight maxCrashes times is failed; the rest of its batch goes one by one",
    () =>
      run(Effect.gen(function*() {
        const log = yield* LogStore.LogStore
        for (let n = 1; n <= 3; n++) yield* appendOne("poison", n)
        const partition = LogStore.partitionOf("poison", log.partitions)
        const lease = Duration.millis(300)
        // Three owners in turn take the partition, read (marking the batch in flight) and die.
        for (let i = 1; i <= 3; i++) {
          const member = `dead-${i}`
          yield* log.join({ group: "crashy", member, lease, startFrom: "earliest" })
          let got: ReadonlyArray<LogStore.PartitionState> = []
          yield* waitFor(
            `${member} takes the partition`,
            Effect.map(log.acquire("crashy", member, [partition], lease), (s) => (got = s).length === 1)
          )
          assert.strictEqual(got[0]!.crashes, i - 1, "a crash counted per dead owner")
          let events: ReadonlyArray<LogStore.LogEvent> = []
          // A read can come back empty while another transaction in the database is still open
          // (the visibility horizon holds rows back): read again until the batch is there.
          yield* waitFor(
            `${member} reads the batch`,
            Effect.map(
              log.read("crashy", member, [{
                partition,
                epoch: got[0]!.epoch,
                after: got[0]!.cursor,
                limit: got[0]!.crashes > 0 ? 1 : 10
              }]),
              (r) => (events = r.events).length > 0
            )
          )
          assert.strictEqual(nOf(events[0]!.message), 1)
          yield* log.leave("crashy", member)
        }
        const { stop } = yield* startRelay({ group: "crashy", maxCrashes: 3, lease: "1 second" })
        yield* waitFor("the rest published", Effect.map(delivered, (d) => d.length === 2))
        yield* stop
        assert.deepStrictEqual((yield* delivered).map(nOf), [2, 3])
        const failed = yield* (yield* OutboxStore).listFailed({ limit: 10 })
        assert.deepStrictEqual(failed.map((f) => nOf(f.message)), [1])
        assert.match(failed[0]!.lastError ?? "", /crash loop: 3/)
      })),
    60_000
  )

  test(
    "fencing: a paused owner cannot move the cursor after its lease was taken over; the new owner publishes its batch again",
    () =>
      run(Effect.gen(function*() {
        const log = yield* LogStore.LogStore
        for (let n = 1; n <= 5; n++) yield* appendOne("fenced", n)
        const partition = LogStore.partitionOf("fenced", log.partitions)
        const lease = Duration.millis(300)
        yield* log.join({ group: "fence", member: "paused", lease, startFrom: "earliest" })
        const [held] = yield* log.acquire("fence", "paused", [partition], lease)
        let events: ReadonlyArray<LogStore.LogEvent> = []
        yield* waitFor(
          "the paused owner reads the batch",
          Effect.map(
            log.read("fence", "paused", [{ partition, epoch: held!.epoch, after: held!.cursor, limit: 10 }]),
            (r) => (events = r.events).length === 5
          )
        )
        // The paused owner stops renewing; a relay takes over once the lease has run out.
        const { stop } = yield* startRelay({ group: "fence", lease: "1 second" })
        yield* waitFor("the new owner published the batch", Effect.map(delivered, (d) => d.length === 5))
        // The paused owner resumes and tries to move the cursor past what it read: refused.
        const settled = yield* log.settle("fence", "paused", [{
          partition,
          epoch: held!.epoch,
          cursor: events[4]!.position
        }])
        assert.deepStrictEqual(settled, [])
        assert.deepStrictEqual(yield* log.renew("fence", "paused", [{ partition, epoch: held!.epoch }], lease), [])
        yield* appendOne("fenced", 6)
        yield* waitFor("later events", Effect.map(delivered, (d) => d.length === 6))
        yield* stop
        assert.deepStrictEqual((yield* delivered).map(nOf), [1, 2, 3, 4, 5, 6])
      })),
    60_000
  )

  test(
    "instances of a group split the partitions and rebalance as they join and leave, publishing nothing twice",
    () =>
      run(Effect.gen(function*() {
        const log = yield* LogStore.LogStore
        const a = yield* startRelay({ group: "shared", lease: "1 second" })
        let n = 0
        const produce = (count: number) =>
          Effect.forEach(Array.from({ length: count }), () => appendOne(`k${n % 13}`, n++), { discard: true })
        yield* produce(40)
        yield* waitFor("a holds everything", Effect.map(a.relay.partitions, (ps) => ps.length === log.partitions))
        const b = yield* startRelay({ group: "shared", lease: "1 second" })
        yield* waitFor(
          "a and b split the partitions",
          Effect.gen(function*() {
            const pa = yield* a.relay.partitions
            const pb = yield* b.relay.partitions
            return pa.length > 0 && pb.length > 0 && pa.length + pb.length === log.partitions &&
              pa.every((p) => !pb.includes(p))
          })
        )
        yield* produce(40)
        yield* waitFor("published while split", Effect.map(delivered, (d) => d.length === n))
        yield* b.stop
        yield* waitFor(
          "a holds everything again",
          Effect.map(a.relay.partitions, (ps) => ps.length === log.partitions)
        )
        yield* produce(40)
        yield* waitFor("published after b left", Effect.map(delivered, (d) => d.length === n))
        yield* a.stop
        const out = yield* delivered
        assert.strictEqual(new Set(ids(out)).size, out.length, "no event twice")
        assert.strictEqual(out.length, 120)
      })),
    60_000
  )

  test("retention deletes what every group has passed, and nothing else", () =>
    run(Effect.gen(function*() {
      const log = yield* LogStore.LogStore
      for (let n = 1; n <= 10; n++) yield* appendOne(`k${n % 4}`, n)
      const first = yield* startRelay({ group: "fast" })
      yield* waitFor("published", Effect.map(delivered, (d) => d.length === 10))
      yield* first.stop
      // A second group that has read nothing yet holds every event back.
      yield* log.join({ group: "slow", member: "slow-1", lease: Duration.seconds(5), startFrom: "earliest" })
      yield* log.leave("slow", "slow-1")
      assert.strictEqual(yield* log.prune({ olderThan: Duration.zero, limit: 1000 }), 0)
      const second = yield* startRelay({ group: "slow" })
      yield* waitFor("published again", Effect.map(delivered, (d) => d.length === 20))
      yield* second.stop
      yield* appendOne("k0", 11)
      let pruned = 0
      yield* waitFor(
        "pruned",
        Effect.map(log.prune({ olderThan: Duration.zero, limit: 4 }), (n) => (pruned += n ?? 0) >= 10 && n === 0)
      )
      assert.strictEqual(pruned, 10)
      const left = yield* logOrder
      assert.strictEqual([...left.values()].flat().length, 1, "the event no group has passed stays")
    })), 60_000)

  test(
    "a new group can start from the latest event; the outbox face refuses per-row relay calls",
    () =>
      run(Effect.gen(function*() {
        yield* appendOne("k", 1)
        const { stop } = yield* startRelay({ group: "late-joiner", startFrom: "latest" })
        yield* waitFor(
          "joined",
          Effect.map(LogStore.LogStore.use((l) => l.groups), (gs) =>
            gs.some((g) => g.group === "late-joiner" && g.members.length > 0))
        )
        yield* appendOne("k", 2)
        yield* waitFor(
          "the new event",
          Effect.map(delivered, (d) =>
            d.length >= 1)
        )
        yield* passTime("200 millis")
        yield* stop
        assert.deepStrictEqual((yield* delivered).map(nOf), [2])
        const store = yield* OutboxStore
        const claim = yield* Effect.exit(store.claim({ relayId: "r", batchSize: 1, lease: Duration.seconds(1) }))
        assert.isTrue(Exit.isFailure(claim))
        const outside = yield* Effect.exit(Outbox.append(Tick, { aggregateId: "k", payload: { n: 3 } }))
        assert.isTrue(Exit.isFailure(outside), "append outside a transaction fails")
      })),
    60_000
  )
}
