/**
 * The contract of consumer groups on a log store (`LogConsumer` over `MemoryLogStore` in core,
 * `PgLogConsumer` in `@tidings/postgres`): each group handles every event once, in order per
 * partition, committing its handlers' work and its cursor together; failures roll back, retry and
 * dead-letter by the consumer decision table; outages count no attempts.
 *
 * @example
 * import { logConsumerContract } from "@tidings/core/testing"
 * logConsumerContract("my driver", MyLogStore.make({ ... }))
 * @since 0.1.0
 * @module
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Schedule, Schema, Scope } from "effect"
import { StoreError, Unavailable } from "../Errors.ts"
import { appendOne, clockOps, type Env, type LogStores, withLog } from "../internal/logContractSupport.ts"
import * as LogConsumer from "../LogConsumer.ts"
import { OutboxStore } from "../OutboxStore.ts"
import type { LogContractOptions } from "./LogRelayContract.ts"

class Flaky extends Schema.TaggedError<Flaky>()("Flaky", {}) {
  get isRetryable(): boolean {
    return true
  }
}
class Bad extends Schema.TaggedError<Bad>()("Bad", {}) {}

/** A consumer group member that records what its committed transactions handled (after commit). */
const startConsumer = (
  group: string,
  fail: (d: LogConsumer.Delivery) => unknown = () => undefined,
  config: Partial<LogConsumer.Config<unknown, OutboxStore>> = {}
) =>
  Effect.gen(function*() {
    const committed: Array<{ readonly group: string; readonly key: string; readonly n: number; readonly id: string }> =
      []
    const attempts: Array<{ readonly n: number; readonly attempt: number }> = []
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(
      LogConsumer.layer<unknown, OutboxStore>({
        group,
        lease: "2 seconds",
        pollInterval: { base: "20 millis", max: "100 millis" },
        retry: Schedule.spaced("20 millis"),
        ...config,
        handler: (d) =>
          Effect.gen(function*() {
            const n = (d.payload as { readonly n: number }).n
            attempts.push({ n, attempt: d.attempt })
            const error = fail(d)
            if (error !== undefined) return yield* Effect.fail(error)
            const store = yield* OutboxStore
            yield* store.afterCommit(Effect.sync(() => void committed.push({ group, key: d.orderingKey, n, id: d.id })))
          })
      }),
      scope
    ).pipe(Effect.orDie)
    return {
      consumer: Context.get(context, LogConsumer.LogConsumer),
      committed,
      attempts,
      stop: Scope.close(scope, Exit.void)
    }
  })

/**
 * Registers the consumer group suite for stores built fresh for each test by `makeStores`.
 * @since 0.1.0
 * @category contracts
 */
export const logConsumerContract = (
  name: string,
  makeStores: Effect.Effect<LogStores, unknown, Scope.Scope>,
  options: LogContractOptions = {}
): void => {
  const onTestClock = options.clock === "test"
  const test = onTestClock ? it.effect : it.live
  const { waitFor } = clockOps(onTestClock)
  const run = <A, E>(body: Effect.Effect<A, E, Env>) => withLog(makeStores, body)

  describe(`log consumer: ${name}`, () => {
    test(
      "each group handles every event once, in order per key, independently of the others",
      () =>
        run(Effect.gen(function*() {
          for (let n = 0; n < 30; n++) yield* appendOne(`k${n % 5}`, n)
          const a = yield* startConsumer("group-a")
          const b = yield* startConsumer("group-b", () => undefined, { batchSize: 3 })
          yield* waitFor(
            "both groups handled everything",
            Effect.sync(() => a.committed.length >= 30 && b.committed.length >= 30)
          )
          for (let n = 30; n < 40; n++) yield* appendOne(`k${n % 5}`, n)
          yield* waitFor("and what came later", Effect.sync(() => a.committed.length >= 40 && b.committed.length >= 40))
          yield* a.stop
          yield* b.stop
          for (const c of [a, b]) {
            assert.strictEqual(c.committed.length, 40)
            assert.strictEqual(new Set(c.committed.map((x) => x.id)).size, 40, "nothing twice")
            for (let k = 0; k < 5; k++) {
              const ns = c.committed.filter((x) => x.key === `k${k}`).map((x) => x.n)
              assert.deepStrictEqual(ns, [...ns].sort((x, y) => x - y), `order of k${k}`)
            }
          }
        })),
      60_000
    )

    test(
      "a failing handler rolls its batch back: the events before it commit, it is retried, then the rest follow",
      () =>
        run(Effect.gen(function*() {
          for (let n = 1; n <= 5; n++) yield* appendOne("k", n)
          let failures = 0
          const c = yield* startConsumer(
            "retrying",
            (d) => ((d.payload as { n: number }).n === 3 && failures++ < 2 ? new Flaky() : undefined)
          )
          yield* waitFor("all handled", Effect.sync(() => c.committed.length >= 5))
          yield* c.stop
          assert.deepStrictEqual(c.committed.map((x) => x.n), [1, 2, 3, 4, 5], "each committed once, in order")
          assert.deepStrictEqual(
            c.attempts.filter((x) => x.n === 3).map((x) => x.attempt),
            [1, 2, 3],
            "the head's attempts count up"
          )
        })),
      60_000
    )

    test(
      "a permanent failure is dead-lettered into the failed table with its group; the cursor moves on",
      () =>
        run(Effect.gen(function*() {
          for (let n = 1; n <= 4; n++) yield* appendOne("k", n)
          const c = yield* startConsumer(
            "dead-letters",
            (d) => ((d.payload as { n: number }).n === 2 ? new Bad() : undefined)
          )
          yield* waitFor("the rest handled", Effect.sync(() => c.committed.length >= 3))
          yield* c.stop
          assert.deepStrictEqual(c.committed.map((x) => x.n), [1, 3, 4])
          const failed = yield* (yield* OutboxStore).listFailed({ limit: 10 })
          assert.deepStrictEqual(failed.map((f) => (f.message.payload as { n: number }).n), [2])
          assert.match(failed[0]!.lastError ?? "", /Bad/)
          // Retrying it hands it to this group again.
          const again = yield* startConsumer("dead-letters")
          assert.strictEqual(yield* (yield* OutboxStore).retryFailed(), 1)
          yield* waitFor("the retried event", Effect.sync(() => again.committed.length >= 1))
          yield* again.stop
          assert.deepStrictEqual(again.committed.map((x) => x.n), [2])
        })),
      60_000
    )

    test(
      "a handler failing because the database is unavailable retries without using up attempts",
      () =>
        run(Effect.gen(function*() {
          yield* appendOne("k", 1)
          let outages = 0
          const c = yield* startConsumer(
            "outage",
            () => (outages++ < 3
              ? new StoreError({ operation: "insert", message: "connection refused", reason: new Unavailable() })
              : undefined),
            { maxAttempts: 1 }
          )
          yield* waitFor("handled after the outage", Effect.sync(() => c.committed.length >= 1))
          yield* c.stop
          assert.deepStrictEqual(c.attempts.map((x) => x.attempt), [1, 1, 1, 1], "no attempt counted")
          assert.strictEqual((yield* (yield* OutboxStore).listFailed({ limit: 10 })).length, 0)
        })),
      60_000
    )
  })
}
