/**
 * Long broker outages, restarts while retries wait, and a broker that blocks publishers, on a
 * private RabbitMQ node of this file (they stop the broker and raise its memory alarm).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Errors from "@tidings/core/Errors"
import * as Event from "@tidings/core/Event"
import * as EventRegistry from "@tidings/core/EventRegistry"
import * as Inbox from "@tidings/core/Inbox"
import type { InboxStore } from "@tidings/core/InboxStore"
import * as MemoryInboxStore from "@tidings/core/MemoryInboxStore"
import * as MemoryOutboxStore from "@tidings/core/MemoryOutboxStore"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as Retry from "@tidings/core/Retry"
import * as PgClient from "@tidings/postgres/PgClient"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { Data, Effect, Fiber, Layer, Schema, Stream } from "effect"
import { SqlClient } from "effect/sql"
import * as path from "node:path"
import { afterAll, beforeAll } from "vitest"
import { freshSchema, pgUrl } from "../../../test/support/pg.ts"
import { exited, spawnScript, waitForOutput } from "../../../test/support/processes.ts"
import { type RunningRabbit, startRabbit } from "../../../test/support/rabbitmq.ts"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import * as AmqpConsumer from "../src/AmqpConsumer.ts"
import * as AmqpPublisher from "../src/AmqpPublisher.ts"
import * as Topology from "../src/Topology.ts"
import { eventually, messageCount, rawChannel, unique } from "./helpers.ts"

let rabbit: RunningRabbit | undefined
beforeAll(async () => {
  rabbit = await startRabbit({ private: true, name: "tidings-outages" })
})
afterAll(async () => {
  await rabbit?.stop()
})

const node = () => {
  if (rabbit?.control === undefined) throw new Error("the private RabbitMQ node did not start")
  return { url: rabbit.url, control: rabbit.control }
}
const ctl = (f: (c: NonNullable<RunningRabbit["control"]>) => Promise<unknown>) =>
  Effect.promise(() => f(node().control))

const Tick = Event.define("tick", { aggregateType: "clock", schema: Schema.Struct({ n: Schema.Int }) })
const registry = EventRegistry.make([Tick])

/** A connection on the private node with a short reconnect cap (1 s): an outage of a few seconds outlasts it many times. */
const connection = (name: string, topology?: Topology.Topology) =>
  AmqpConnection.make({
    url: node().url,
    name,
    reconnectDelay: "100 millis",
    reconnectMaxDelay: "1 second",
    heartbeat: "5 seconds",
    ...(topology === undefined ? {} : { topology })
  })

/** Ready messages in a queue, read on a connection of its own (the broker may have restarted since). */
const count = (queue: string) =>
  Effect.scoped(Effect.flatMap(rawChannel(node().url), (channel) => messageCount(channel, queue)))

class NotYet extends Data.TaggedError("NotYet")<{}> {
  get isRetryable() {
    return true
  }
}

describe("RabbitMQ outages (private broker node)", () => {
  it.live("a broker down far longer than the reconnect cap: nothing ends, readiness is false, publishing waits; all drains once it is back", () =>
    Effect.gen(function*() {
      const schema = yield* freshSchema("outage")
      const cq = Topology.consumerQueue({
        queue: unique("outage.q"),
        exchange: unique("outage.x"),
        retryDelays: ["200 millis"]
      })
      const consuming = yield* connection("outage-consumer", cq.topology)
      const publishing = yield* connection("outage-publisher", cq.topology)
      const seen = new Map<string, number>()
      let reconnectedAt: number | undefined
      yield* publishing.changes.pipe(
        Stream.runForEach((state) =>
          Effect.sync(() => void (state._tag === "Connected" && state.generation > 1 && (reconnectedAt ??= Date.now())))
        ),
        Effect.forkScoped
      )
      const consumer = yield* AmqpConsumer.make({
        name: "outage",
        queue: cq,
        registry,
        concurrency: 4,
        handler: (d) => Effect.sync(() => void seen.set(d.messageId!, Date.now()))
      }).pipe(Effect.provideService(AmqpConnection.AmqpConnection, consuming))
      const publisher = yield* AmqpPublisher.make({
        exchange: cq.topology.exchanges[0]!.name,
        confirmTimeout: "3 seconds"
      }).pipe(
        Effect.provideService(AmqpConnection.AmqpConnection, publishing)
      )
      const store = yield* PgOutboxStore.make({ schema })
      yield* Layer.build(Relay.layer({
        concurrency: 2,
        lease: "30 seconds",
        pollInterval: { base: "20 millis", max: "200 millis" },
        retry: Retry.exponentialBackoff({ base: "100 millis", max: "500 millis" }),
        maxAttempts: 1000,
        statsInterval: false,
        retention: false
      })).pipe(Effect.provide(Layer.mergeAll(
        Layer.succeed(OutboxStore, store),
        Layer.succeed(Publisher, Publisher.of({ publish: publisher.publish, awaitAvailable: publisher.awaitAvailable }))
      )))
      const sql = yield* SqlClient.SqlClient
      const append = (from: number, count: number) =>
        sql.withTransaction(
          Outbox.appendAll(
            Array.from(
              { length: count },
              (_, i) => Tick.make({ aggregateId: `k${from + i}`, payload: { n: from + i } })
            )
          )
        ).pipe(
          Effect.provideService(OutboxStore, store),
          Effect.map((ms) => ms.map((m) => m.id))
        )
      const ids = [...yield* append(0, 50)]
      yield* eventually(Effect.sync(() => ids.every((id) => seen.has(id))), "30 seconds", "the first events")

      yield* ctl((c) => c.stopApp())
      yield* eventually(Effect.map(publishing.state, (s) => s._tag === "Reconnecting"), "10 seconds", "Reconnecting")
      assert.isFalse(yield* publishing.isReady)
      const waiting = yield* Effect.forkChild(publisher.awaitAvailable)
      const failed = yield* Effect.flip(
        publisher.publish([{
          id: crypto.randomUUID(),
          type: "tick",
          version: 1,
          aggregateType: "clock",
          aggregateId: "c",
          orderingKey: "c",
          payload: { n: -1 },
          headers: {},
          occurredAt: new Date()
        }])
      )
      assert.isTrue(Errors.isUnavailable(failed), "publishing while down is unavailability, not a message failure")
      ids.push(...yield* append(50, 50))
      // Far longer than the reconnect cap (1 s): many attempts, and nobody gives up.
      const attempts = yield* eventually(
        Effect.map(publishing.state, (s) => s._tag === "Reconnecting" && s.attempt >= 5),
        "30 seconds",
        "five reconnect attempts"
      ).pipe(
        Effect.andThen(publishing.state)
      )
      assert.strictEqual(attempts._tag, "Reconnecting")
      assert.isUndefined(waiting.pollUnsafe(), "awaitAvailable waits while the broker is down")
      assert.isFalse(yield* consumer.isConsuming)

      yield* ctl((c) => c.startApp())
      yield* Fiber.join(waiting)
      yield* eventually(
        Effect.sync(() => ids.every((id) => seen.has(id))),
        "60 seconds",
        "every event after the outage"
      )
      const drainedMs = Math.max(...ids.map((id) => seen.get(id)!)) - reconnectedAt!
      yield* eventually(
        Effect.map(store.stats, (s) => s.pending === 0 && s.processing === 0),
        "30 seconds",
        "the outbox to settle"
      )
      const stats = yield* store.stats
      console.log(
        `outage: the last of ${ids.length} events consumed ${drainedMs} ms after the publisher reconnected (reconnect cap 1 s, ${
          attempts._tag === "Reconnecting" ? attempts.attempt : 0
        }+ attempts)`
      )
      assert.deepStrictEqual([stats.failed, stats.published], [0, ids.length])
      assert.isTrue(yield* publishing.isReady)
      assert.isTrue(yield* consumer.isConsuming)
    }).pipe(Effect.scoped, Effect.provide(PgClient.layer({ url: pgUrl(), maxConnections: 6 }))))

  /**
   * 200 confirmed messages each fail their first delivery and wait in the retry queue; `fault` strikes
   * while their delay runs out; then every message must have its effect exactly once (the inbox).
   */
  const retryPath = (fault: Effect.Effect<void>) =>
    Effect.gen(function*() {
      const total = 200
      const cq = Topology.consumerQueue({
        queue: unique("retry.q"),
        exchange: unique("retry.x"),
        retryDelays: ["4 seconds"]
      })
      const consuming = yield* connection("retry-consumer", cq.topology)
      const publishing = yield* connection("retry-publisher", cq.topology)
      const effects = new Map<string, number>()
      const firstTries = new Set<string>()
      // The effect runs through the inbox: at most once per message, whatever the broker redelivers.
      const stores = yield* Layer.build(Layer.mergeAll(MemoryInboxStore.layer, MemoryOutboxStore.layer))
      const effect = Inbox.wrap("retry-effects", (d: AmqpConsumer.Delivery<EventRegistry.Decoded>) =>
        Effect.sync(() =>
          void effects.set(d.messageId!, (effects.get(d.messageId!) ?? 0) + 1)
        ))
      yield* AmqpConsumer.make({
        name: "retry-path",
        queue: cq,
        registry,
        concurrency: 8,
        maxAttempts: 20,
        // Every message fails its first delivery: it waits out its delay in the retry queue.
        handler: (
          d
        ): Effect.Effect<void, NotYet | Inbox.HandleError | Inbox.MissingMessageId, InboxStore | OutboxStore> =>
          d.attempt === 1
            ? Effect.sync(() => void firstTries.add(d.messageId!)).pipe(Effect.andThen(Effect.fail(new NotYet())))
            : effect(d)
      }).pipe(Effect.provideService(AmqpConnection.AmqpConnection, consuming), Effect.provideContext(stores))
      const publisher = yield* AmqpPublisher.make({ exchange: cq.topology.exchanges[0]!.name }).pipe(
        Effect.provideService(AmqpConnection.AmqpConnection, publishing)
      )
      const messages = Array.from({ length: total }, (_, n) => ({
        id: crypto.randomUUID(),
        type: Tick.type,
        version: 1,
        aggregateType: "clock",
        aggregateId: `k${n}`,
        orderingKey: `k${n}`,
        payload: { n },
        headers: {},
        occurredAt: new Date()
      }))
      const results = yield* publisher.publish(messages)
      assert.isTrue(results.every((r) => r._tag === "Published"), "every message confirmed by the broker")
      yield* eventually(Effect.sync(() => firstTries.size === total), "30 seconds", "every first delivery to fail")
      yield* eventually(
        Effect.map(count(cq.retryQueues[0]!.name), (n) => n === total),
        "30 seconds",
        "every copy in the retry queue"
      )

      yield* fault

      yield* eventually(Effect.sync(() => effects.size === total), "60 seconds", "every effect after the fault")
      assert.deepStrictEqual([...effects.values()].filter((n) => n !== 1), [], "each effect exactly once")
      assert.deepStrictEqual(messages.filter((m) => !effects.has(m.id)).map((m) => m.id), [], "none lost")
      assert.strictEqual(yield* count(cq.deadLetterQueue), 0)
    }).pipe(Effect.scoped)

  it.live("no confirmed message is lost on the retry path: the broker restarts while retries expire, every message has its effect once", () =>
    retryPath(Effect.gen(function*() {
      // Down for longer than the retry delay (4 s): every copy expires while the broker is away.
      yield* ctl((c) => c.stopApp())
      yield* Effect.sleep("5 seconds")
      yield* ctl((c) => c.startApp())
    })))

  it.live("SIGTERM with the broker blocking publishers (memory alarm): the relay process exits within shutdownTimeout + 1 s, nothing left claimed", () =>
    Effect.gen(function*() {
      const shutdownMs = 3000
      const schema = yield* freshSchema("blocked")
      const exchange = unique("blocked.x")
      const queue = unique("blocked.q")
      const topology = Topology.make({
        exchanges: [{ name: exchange }],
        queues: [{ name: queue, type: "classic" }],
        bindings: [{ exchange, queue, routingKey: "#" }]
      })
      yield* connection("blocked-setup", topology)
      const store = yield* PgOutboxStore.make({ schema })
      const sql = yield* SqlClient.SqlClient
      const append = (n: number) =>
        sql.withTransaction(
          Outbox.appendAll(
            Array.from({ length: n }, (_, i) => Tick.make({ aggregateId: `k${i % 10}`, payload: { n: i } }))
          )
        ).pipe(
          Effect.provideService(OutboxStore, store)
        )
      const child = spawnScript(path.join(import.meta.dirname, "fixtures", "amqpRelay.ts"), {
        TIDINGS_TEST_PG_URL: pgUrl(),
        AMQP_URL: node().url,
        SCHEMA: schema,
        EXCHANGE: exchange,
        SHUTDOWN_MS: String(shutdownMs)
      })
      yield* Effect.addFinalizer(() => Effect.sync(() => child.exitCode === null && child.kill("SIGKILL")))
      yield* Effect.promise(() => waitForOutput(child, "relaying"))
      yield* append(100)
      yield* eventually(Effect.map(store.stats, (s) => s.published === 100), "30 seconds", "the relay publishing")

      yield* ctl((c) => c.ctl(["set_vm_memory_high_watermark", "0.0000001"]))
      yield* Effect.addFinalizer(() => ctl((c) => c.ctl(["set_vm_memory_high_watermark", "0.4"])).pipe(Effect.ignore))
      // Events keep coming: the next batches are written to a connection the broker stops reading.
      const producer = yield* Effect.forkChild(
        Effect.forever(append(20).pipe(Effect.andThen(Effect.yieldNow))).pipe(Effect.orDie)
      )
      yield* Effect.promise(() => waitForOutput(child, "state Connected blocked"))
      yield* eventually(
        Effect.map(store.stats, (s) => s.processing > 0),
        "60 seconds",
        "a batch in flight on the blocked connection"
      )
      yield* Fiber.interrupt(producer)

      const started = Date.now()
      child.kill("SIGTERM")
      const code = yield* Effect.promise(() => exited(child))
      const outerMs = Date.now() - started
      const stopped = /stopped (\d+)/.exec(child.output())
      console.log(
        `blocked broker: SIGTERM -> shut down in ${
          stopped?.[1]
        } ms, process gone after ${outerMs} ms (shutdownTimeout ${shutdownMs} ms)`
      )
      assert.isDefined(stopped, child.output())
      // It exits 0 after its shutdown ("stopped"); a Deno parent reports the signal it sent instead.
      assert.include([0, "SIGTERM"], code, child.output())
      assert.isBelow(Number(stopped![1]), shutdownMs + 1000, "the shutdown fits in shutdownTimeout + 1 s")
      const stats = yield* store.stats
      assert.strictEqual(stats.processing, 0, "nothing left claimed")
    }).pipe(Effect.scoped, Effect.provide(PgClient.layer({ url: pgUrl(), maxConnections: 4 }))))
})
