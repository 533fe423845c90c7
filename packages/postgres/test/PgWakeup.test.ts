import { assert, describe, it } from "@effect/vitest"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as Metrics from "@tidings/core/Metrics"
import { eventually, seed, startRelay } from "@tidings/core/testing"
import * as Wakeup from "@tidings/core/Wakeup"
import { Effect, Layer, Metric, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, pgUrl } from "../../../test/support/pg.ts"
import * as PgClient from "../src/PgClient.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"
import * as PgWakeup from "../src/PgWakeup.ts"

/**
 * Waits until a connection listens on the schema's outbox channel: its last statement, as
 * `pg_stat_activity` shows it, is the LISTEN (a probe NOTIFY instead could wake a relay late).
 */
const listening = (schema: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const statement = `listen "${PgOutboxStore.channel(schema)}"`
    yield* eventually(
      Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE lower(query) = ${statement}`,
        ([row]) => (row?.n ?? 0) > 0
      ),
      "5 seconds",
      "LISTEN"
    )
  })

// The relay and its listener get a private wake-up hub, as if they ran in another process than the
// appender (whose after-commit wake-up goes to the default hub): only NOTIFY can wake them.
const scenario = (notify: boolean | "in-transaction") =>
  Effect.scoped(Effect.gen(function*() {
    const schema = yield* freshSchema("wk")
    const remote = Wakeup.makeHub()
    // One process plays both sides here, so the listener must not skip "its own" notifications.
    const relayLayers = Layer.mergeAll(
      PgWakeup.layer({ schema, ignoreOwn: false }),
      PgOutboxStore.layer({ schema }),
      MemoryBroker.layer()
    )
    const { broker, relay, stop } = yield* Effect.gen(function*() {
      const context = yield* Layer.build(relayLayers)
      const broker = Layer.succeedContext(context)
      const started = yield* startRelay({
        statsInterval: false,
        retention: false,
        pollInterval: { base: "4 seconds", max: "4 seconds" }
      }).pipe(
        Effect.provide(broker)
      )
      return { broker: context, relay: started.relay, stop: started.stop }
    }).pipe(Effect.provideService(Wakeup.Wakeups, remote))
    // the producer's store lives as long as the test, as it would in an app
    const producer = yield* Layer.build(PgOutboxStore.layer({ schema, notify }))
    // the relay polled once and is idle for 4 s; its listener is in place once a NOTIFY wakes it
    yield* eventually(Effect.map(relay.status, (s) => s.claims > 0 && s.idle === 1), "5 seconds", "the idle relay")
    yield* listening(schema)
    const started = Date.now()
    yield* seed(1).pipe(Effect.provideContext(producer))
    const delivered = yield* eventually(
      Effect.map(
        MemoryBroker.MemoryBroker.use((b) => b.delivered).pipe(Effect.provide(Layer.succeedContext(broker))),
        (d) => d.length === 1
      ),
      "1500 millis",
      "delivery"
    ).pipe(Effect.as(Date.now() - started), Effect.catchDefect(() => Effect.succeed(undefined)))
    yield* stop
    return delivered
  })).pipe(Effect.provide(PgClient.layer({ url: pgUrl() })))

describe("PgWakeup", () => {
  it.live("a NOTIFY from another process's append wakes an idle relay at once", () =>
    Effect.gen(function*() {
      const elapsed = yield* scenario(true)
      assert.isDefined(elapsed, "not delivered within 1.5 s although the poll interval is 4 s")
      assert.isBelow(elapsed!, 1000)
    }))

  it.live("the in-transaction NOTIFY mode wakes it too", () =>
    Effect.gen(function*() {
      const elapsed = yield* scenario("in-transaction")
      assert.isDefined(elapsed)
      assert.isBelow(elapsed!, 1000)
    }))

  it.live("coalesced NOTIFYs: a burst of commits sends far fewer NOTIFYs, and the last commit is always followed by one", () =>
    Effect.scoped(Effect.gen(function*() {
      const schema = yield* freshSchema("wk")
      const pg = yield* PgClient.PgClient
      const heard: Array<number> = []
      yield* pg.listen(PgOutboxStore.channel(schema)).pipe(
        Stream.runForEach(() => Effect.sync(() => void heard.push(Date.now()))),
        Effect.forkScoped
      )
      yield* listening(schema)
      const producer = yield* Layer.build(PgOutboxStore.layer({ schema, notify: true }))
      const lastCommit = yield* Effect.gen(function*() {
        yield* Effect.forEach(Array.from({ length: 8 }), () => seed(25), { concurrency: 8, discard: true })
        return Date.now()
      }).pipe(Effect.provideContext(producer))
      yield* eventually(
        Effect.sync(() => (heard.at(-1) ?? 0) >= lastCommit - 5),
        "5 seconds",
        "a NOTIFY after the last commit"
      )
      assert.isAbove(heard.length, 0)
      assert.isBelow(heard.length, 200, `${heard.length} NOTIFYs for 200 commits`)
      assert.isAtLeast(heard.at(-1)!, lastCommit - 5, "a NOTIFY follows the last commit")
    })).pipe(Effect.provide(PgClient.layer({ url: pgUrl() }))))

  it.live("by default a process ignores its own NOTIFYs (its relays were woken after commit)", () =>
    Effect.scoped(Effect.gen(function*() {
      const schema = yield* freshSchema("wk")
      const hub = Wakeup.makeHub()
      const mailbox = yield* hub.subscribe
      yield* Layer.build(PgWakeup.layer({ schema })).pipe(Effect.provideService(Wakeup.Wakeups, hub))
      const pg = yield* PgClient.PgClient
      const woken = Effect.map(
        Metric.value(Metric.withAttributes(Metrics.wakeups, { source: "notify" })),
        (c) => c.count
      )
      yield* listening(schema)
      const producer = yield* Layer.build(PgOutboxStore.layer({ schema, notify: true }))
      const before = yield* woken
      yield* seed(3).pipe(Effect.provideContext(producer))
      // Notifications arrive in commit order on the one listening connection: once the one sent
      // after our appends has woken the hub, our own were heard (and ignored) before it.
      yield* pg.notify(PgOutboxStore.channel(schema), "another-process")
      yield* eventually(Effect.map(woken, (n) => n > before), "5 seconds", "the foreign wake-up")
      assert.strictEqual((yield* woken) - before, 1, "no wake-up from our own NOTIFYs, one from the foreign one")
      assert.strictEqual(yield* mailbox.take, "notify")
    })).pipe(Effect.provide(PgClient.layer({ url: pgUrl() }))))

  it.live("without NOTIFY the other process's relay waits for its poll (control)", () =>
    Effect.gen(function*() {
      assert.isUndefined(yield* scenario(false))
    }))
})
