/**
 * A log group member's workers share its partitions, each taking a share per read while there is a
 * backlog. A worker whose share turned out drained reads the partitions that still have a backlog
 * before it sleeps: it used to sleep a poll interval while the backlog waited (the claim benchmark's
 * slow runs, up to 3×). Without a backlog, the worker a wake-up starts reads every partition at once.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { TestClock } from "effect/testing"
import { appendOne, delivered, nOf } from "../src/internal/logContractSupport.ts"
import * as LogRelay from "../src/LogRelay.ts"
import * as LogStore from "../src/LogStore.ts"
import * as MemoryBroker from "../src/MemoryBroker.ts"
import * as MemoryLogStore from "../src/MemoryLogStore.ts"
import { OutboxStore } from "../src/OutboxStore.ts"

/** A key whose events land in `partition` of `partitions`. */
const keyIn = (partition: number, partitions: number): string => {
  for (let i = 0;; i++) if (LogStore.partitionOf(`key-${i}`, partitions) === partition) return `key-${i}`
}

/** Two workers, leases that outlast the test, and a poll 10 s away: only wake-ups and the workers' own loop read. */
const twoWorkers: LogRelay.Config = {
  concurrency: 2,
  lease: "30 seconds",
  pollInterval: { base: "10 seconds", max: "10 seconds" },
  statsInterval: false,
  retention: false
}

describe("log group workers", () => {
  it.effect("a worker whose partitions are drained reads the others' backlog before sleeping a poll interval", () =>
    Effect.gen(function*() {
      // 4 partitions, 2 workers taking 2 each, one event per partition and read: the backlog sits in
      // partitions 2 and 3 only, so some reads take two drained partitions.
      const keys = [keyIn(2, 4), keyIn(3, 4)]
      for (let n = 0; n < 20; n++) yield* appendOne(keys[n % 2]!, n)
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(
        LogRelay.layer({ ...twoWorkers, batchSize: 1 }),
        scope
      )
      // Far less than one poll interval of (test) time: only reads that follow each other get there.
      for (let i = 0; i < 50 && (yield* delivered).length < 20; i++) yield* TestClock.adjust("1 millis")
      const published = yield* delivered
      assert.strictEqual(published.length, 20, "the whole backlog within 50 ms of a 10 s poll interval")
      for (const key of keys) {
        const ns = published.filter((m) => m.orderingKey === key).map(nOf)
        assert.deepStrictEqual(ns, [...ns].sort((a, b) => a - b), `in order: ${key}`)
      }
      yield* Scope.close(scope, Exit.void)
    }).pipe(Effect.provide(Layer.mergeAll(MemoryLogStore.layer({ partitions: 4 }), MemoryBroker.layer()))))

  it.effect("without a backlog, a wake-up's worker reads every partition in one statement", () =>
    Effect.gen(function*() {
      // What each read asked for (partitions) and found (events), from the store's side.
      const reads: Array<{ readonly partitions: number; readonly events: number }> = []
      const memory = yield* Effect.orDie(MemoryLogStore.make({ partitions: 4 }))
      const log = LogStore.LogStore.of({
        ...memory.log,
        read: (group, member, requests) =>
          Effect.tap(
            memory.log.read(group, member, requests),
            (r) => Effect.sync(() => reads.push({ partitions: requests.length, events: r.events.length }))
          )
      })
      const scope = yield* Scope.make()
      const stores = Context.make(LogStore.LogStore, log).pipe(Context.add(OutboxStore, memory.outbox))
      yield* Layer.buildWithScope(
        LogRelay.layer({ ...twoWorkers, batchSize: 100 }).pipe(Layer.provide(Layer.succeedContext(stores))),
        scope
      )
      // The group starts, finds the log empty and waits (a poll is 10 s away).
      for (let i = 0; i < 20; i++) yield* TestClock.adjust("1 millis")
      reads.length = 0
      yield* appendOne(keyIn(3, 4), 1).pipe(Effect.provideService(OutboxStore, memory.outbox))
      for (let i = 0; i < 50 && (yield* delivered).length < 1; i++) yield* TestClock.adjust("1 millis")
      assert.strictEqual((yield* delivered).length, 1, "published at the wake-up, not at a poll")
      assert.deepStrictEqual(reads[0], { partitions: 4, events: 1 }, "the first read covered every partition")
      // Nothing was left behind and wake-ups arrive: no read follows to find nothing.
      for (let i = 0; i < 50; i++) yield* TestClock.adjust("1 millis")
      assert.strictEqual(reads.length, 1, "no follow-up read")
      // The next commit wakes it again.
      yield* appendOne(keyIn(1, 4), 2).pipe(Effect.provideService(OutboxStore, memory.outbox))
      for (let i = 0; i < 50 && (yield* delivered).length < 2; i++) yield* TestClock.adjust("1 millis")
      assert.strictEqual((yield* delivered).length, 2)
      assert.deepStrictEqual(reads[1], { partitions: 4, events: 1 })
      yield* Scope.close(scope, Exit.void)
    }).pipe(Effect.provide(MemoryBroker.layer())))

  it.effect("every group in a process hears every commit", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const relay = (group: string) => LogRelay.layer({ ...twoWorkers, group })
      yield* Layer.buildWithScope(Layer.mergeAll(relay("a"), relay("b")), scope)
      for (let i = 0; i < 20; i++) yield* TestClock.adjust("1 millis")
      yield* appendOne(keyIn(2, 4), 1)
      // Both groups publish it (two copies), each at the wake-up: a poll is 10 s away.
      for (let i = 0; i < 50 && (yield* delivered).length < 2; i++) yield* TestClock.adjust("1 millis")
      assert.strictEqual((yield* delivered).length, 2, "one copy per group")
      yield* Scope.close(scope, Exit.void)
    }).pipe(Effect.provide(Layer.mergeAll(MemoryLogStore.layer({ partitions: 4 }), MemoryBroker.layer()))))
})
