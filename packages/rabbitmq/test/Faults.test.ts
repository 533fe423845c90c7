/**
 * Broker faults on a private RabbitMQ node of this file (closing every connection and restarting the
 * broker would disturb the other test files on the shared one).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as EventRegistry from "@tidings/core/EventRegistry"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as Retry from "@tidings/core/Retry"
import * as PgClient from "@tidings/postgres/PgClient"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { Cause, Effect, Exit, Fiber, Layer, Option, Schema, Scope, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, beforeAll } from "vitest"
import { freshSchema, pgUrl } from "../../../test/support/pg.ts"
import { type RunningRabbit, startRabbit } from "../../../test/support/rabbitmq.ts"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import * as AmqpConsumer from "../src/AmqpConsumer.ts"
import * as AmqpPublisher from "../src/AmqpPublisher.ts"
import * as Topology from "../src/Topology.ts"
import { eventually, fastReconnect, unique } from "./helpers.ts"

let rabbit: RunningRabbit | undefined
beforeAll(async () => {
  rabbit = await startRabbit({ private: true, name: "tidings-faults" })
})
afterAll(async () => {
  await rabbit?.stop()
})

const node = () => {
  if (rabbit?.control === undefined) throw new Error("the private RabbitMQ node did not start")
  return { url: rabbit.url, control: rabbit.control }
}

const ctl = (f: (c: NonNullable<RunningRabbit["control"]>) => Promise<void>) => Effect.promise(() => f(node().control))

const Tick = Event.define("tick", { aggregateType: "clock", schema: Schema.Struct({ n: Schema.Int }) })
const registry = EventRegistry.make([Tick])

const connectionConfig = (name: string, topology?: Topology.Topology): AmqpConnection.Config => ({
  url: node().url,
  name,
  reconnect: fastReconnect,
  heartbeat: "5 seconds",
  ...(topology === undefined ? {} : { topology })
})

describe("RabbitMQ faults (private broker node)", () => {
  it.live(
    "outbox -> relay -> RabbitMQ -> consumer: 10,000 events, none lost, through two connection kills and a broker restart",
    () =>
      Effect.gen(function*() {
        const total = 10_000
        const schema = yield* freshSchema("amqp")
        const exchange = unique("e2e.x")
        const cq = Topology.consumerQueue({ queue: unique("e2e.q"), exchange, retryDelays: ["200 millis"] })

        // Separate connections for publishing and consuming, as RabbitMQ recommends: flow control
        // on the publisher's connection never stalls acks.
        const consumerConnection = yield* AmqpConnection.make(connectionConfig("e2e-consumer", cq.topology))
        const publisherConnection = yield* AmqpConnection.make(connectionConfig("e2e-publisher", cq.topology))
        const states: Array<AmqpConnection.State> = []
        yield* consumerConnection.changes.pipe(
          Stream.runForEach((s) => Effect.sync(() => void states.push(s))),
          Effect.forkScoped
        )

        const seen = new Map<string, number>()
        yield* AmqpConsumer.make({
          name: "e2e",
          queue: cq,
          registry,
          concurrency: 16,
          prefetch: 200,
          // Every connection kill redelivers what was in flight; that must not dead-letter anything.
          maxAttempts: 50,
          handler: (d) => Effect.sync(() => void seen.set(d.messageId!, (seen.get(d.messageId!) ?? 0) + 1))
        }).pipe(Effect.provideService(AmqpConnection.AmqpConnection, consumerConnection))

        const publisher = yield* AmqpPublisher.make({ exchange, confirmTimeout: "3 seconds" }).pipe(
          Effect.provideService(AmqpConnection.AmqpConnection, publisherConnection)
        )
        const store = yield* PgOutboxStore.make({ schema })
        const relayScope = yield* Scope.make()
        yield* Layer.buildWithScope(
          Relay.layer({
            concurrency: 2,
            batchSize: 200,
            lease: "10 seconds",
            pollInterval: { base: "20 millis", max: "200 millis" },
            retry: Retry.exponentialBackoff({ base: "100 millis", max: "1 second" }),
            maxAttempts: 100,
            statsInterval: false,
            retention: false
          }),
          relayScope
        ).pipe(
          Effect.provide(
            Layer.mergeAll(
              Layer.succeed(OutboxStore, store),
              Layer.succeed(Publisher, Publisher.of({ publish: publisher.publish }))
            )
          )
        )

        // Producer: 100 transactions of 100 events, paced so that the stream lasts several seconds.
        const sql = yield* SqlClient.SqlClient
        const ids: Array<string> = []
        const producer = yield* Effect.gen(function*() {
          for (let tx = 0; tx < total / 100; tx++) {
            const drafts = Array.from({ length: 100 }, (_, i) =>
              Tick.make({ aggregateId: `k${(tx * 100 + i) % 50}`, payload: { n: tx * 100 + i } }))
            const written = yield* sql.withTransaction(Outbox.appendAll(drafts)).pipe(
              Effect.provideService(OutboxStore, store)
            )
            ids.push(...written.map((m) =>
              m.id
            ))
            // Paced by the consumer (at most 1,000 events ahead), so that the faults below hit mid-stream.
            yield* eventually(
              Effect.sync(() => ids.length - seen.size <= 1000),
              "120 seconds",
              "the consumer to catch up"
            )
          }
        }).pipe(Effect.forkScoped)

        const consumed = () => seen.size
        const faults: Array<{ readonly fault: string; readonly consumedAt: number }> = []
        const when = (count: number) =>
          eventually(Effect.sync(() => consumed() >= count), "60 seconds", `${count} consumed events`)
        const started = Date.now()
        yield* when(1500)
        faults.push({ fault: "close_all_connections #1", consumedAt: consumed() })
        yield* ctl((c) => c.closeAllConnections("fault test 1"))
        yield* when(4000)
        faults.push({ fault: "close_all_connections #2", consumedAt: consumed() })
        yield* ctl((c) => c.closeAllConnections("fault test 2"))
        yield* when(6500)
        faults.push({ fault: "stop_app / start_app", consumedAt: consumed() })
        yield* ctl((c) => c.stopApp())
        // Down until the consumer's connection has noticed and is trying again.
        yield* eventually(
          Effect.map(consumerConnection.state, (s) => s._tag === "Reconnecting"),
          "30 seconds",
          "the consumer to notice the outage"
        )
        yield* ctl((c) => c.startApp())

        yield* eventually(
          Effect.sync(() => ids.length === total && ids.every((id) => seen.has(id))),
          "90 seconds",
          "every event consumed"
        )
        yield* Fiber.join(producer)
        yield* eventually(
          Effect.map(store.stats, (s) => s.pending === 0 && s.processing === 0),
          "30 seconds",
          "the outbox to settle"
        )
        const elapsed = Date.now() - started
        yield* Scope.close(relayScope, Exit.void)

        const stats = yield* store.stats
        const deliveries = [...seen.values()].reduce((a, b) => a + b, 0)
        const duplicates = deliveries - seen.size
        console.log(
          `e2e: ${total} events in ${elapsed} ms; ${deliveries} deliveries, ${duplicates} duplicates (at-least-once); ` +
            `faults ${faults.map((f) => `${f.fault} at ${f.consumedAt}`).join(", ")}; ` +
            `consumer connection generations: ${states.filter((s) => s._tag === "Connected").length}`
        )
        assert.strictEqual(ids.length, total)
        assert.deepStrictEqual(ids.filter((id) => !seen.has(id)), [], "no event lost")
        assert.strictEqual(seen.size, total, "nothing consumed that was not appended")
        assert.deepStrictEqual([stats.pending, stats.processing, stats.failed, stats.published], [0, 0, 0, total])
        // The faults hit mid-stream, and each one dropped the consumer's connection.
        for (const f of faults) assert.isBelow(f.consumedAt, total, `${f.fault} happened mid-stream`)
        const last = yield* consumerConnection.state
        assert.isTrue(
          last._tag === "Connected" && last.generation >= 4,
          `3 faults, 3 reconnects at least: ${JSON.stringify(last)}`
        )
        assert.isTrue(
          states.some((s) => s._tag === "Reconnecting" && s.lastError.code === 320),
          "a broker-forced close (320 CONNECTION_FORCED) was observed"
        )
        assert.isTrue(yield* publisherConnection.isReady)
      }).pipe(Effect.scoped, Effect.provide(PgClient.layer({ url: pgUrl(), maxConnections: 8 }))),
    120_000
  )

  it.live("while the broker is down, publishing fails fast and readiness is false; both recover by themselves", () =>
    Effect.gen(function*() {
      const exchange = unique("down.x")
      const queue = unique("down.q")
      const topology = Topology.make({
        exchanges: [{ name: exchange }],
        queues: [{ name: queue, type: "classic" }],
        bindings: [{ exchange, queue, routingKey: "#" }]
      })
      const connection = yield* AmqpConnection.make(connectionConfig("down", topology))
      const publisher = yield* AmqpPublisher.make({ exchange }).pipe(
        Effect.provideService(AmqpConnection.AmqpConnection, connection)
      )
      const message = () => ({
        id: crypto.randomUUID(),
        type: "tick",
        version: 1,
        aggregateType: "clock",
        aggregateId: "c",
        orderingKey: "c",
        payload: { n: 1 },
        headers: {},
        occurredAt: new Date()
      })
      assert.strictEqual((yield* publisher.publish([message()]))[0]!._tag, "Published")

      yield* ctl((c) => c.stopApp())
      yield* eventually(Effect.map(connection.state, (s) => s._tag === "Reconnecting"), "10 seconds", "Reconnecting")
      assert.isFalse(yield* connection.isReady)
      const t0 = Date.now()
      const exit = yield* Effect.exit(publisher.publish([message()]))
      assert.isBelow(Date.now() - t0, 500, "no waiting for a broker that is down")
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.findErrorOption(exit.cause)) : undefined
      assert.strictEqual(error?._tag, "PublishError")
      assert.include(error?.message ?? "", "not connected")
      assert.strictEqual(error?.reason._tag, "Unavailable")
      assert.isTrue(error?.isRetryable)
      const awaited = yield* Effect.exit(connection.awaitReady("300 millis"))
      assert.isTrue(Exit.isFailure(awaited), "awaitReady gives up with the last error")

      yield* ctl((c) => c.startApp())
      yield* connection.awaitReady("20 seconds")
      yield* eventually(
        Effect.map(publisher.publish([message()]), (r) => r[0]!._tag === "Published").pipe(
          Effect.catch(() => Effect.succeed(false))
        ),
        "10 seconds",
        "publishing after the restart"
      )
    }).pipe(Effect.scoped))
})
