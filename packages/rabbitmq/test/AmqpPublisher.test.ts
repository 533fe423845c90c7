import { assert, describe, it } from "@effect/vitest"
import type * as Message from "@tidings/core/Message"
import type * as Publisher from "@tidings/core/Publisher"
import { Effect } from "effect"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import * as AmqpPublisher from "../src/AmqpPublisher.ts"
import * as Topology from "../src/Topology.ts"
import { connect, drain, eventually, messageCount, rawChannel, unique } from "./helpers.ts"

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

let n = 0
const message = (
  type = "order.placed",
  payload: unknown = { orderId: `o-${n}`, total: { cents: n, currency: "EUR" } }
): Message.Message => ({
  id: crypto.randomUUID(),
  type,
  version: 2,
  aggregateType: "order",
  aggregateId: `order-${n}`,
  orderingKey: `key-${n++}`,
  payload,
  headers: { traceparent, "x-custom": "yes" },
  occurredAt: new Date("2026-11-25T12:00:00.000Z")
})

const publisherOn = (connection: AmqpConnection.Service, config: AmqpPublisher.Config) =>
  AmqpPublisher.make(config).pipe(Effect.provideService(AmqpConnection.AmqpConnection, connection))

const rejected = (results: ReadonlyArray<Publisher.PublishResult>) =>
  results.flatMap((r) => r._tag === "Rejected" ? [r.error] : [])

/** An exchange with one classic queue bound to `#` (or to nothing). */
const setup = (options: { readonly bind?: boolean; readonly queueArguments?: Record<string, unknown> } = {}) =>
  Effect.gen(function*() {
    const exchange = unique("pub.x")
    const queue = unique("pub.q")
    const topology = Topology.make({
      exchanges: [{ name: exchange, type: "topic", autoDelete: true }],
      queues: [{
        name: queue,
        type: "classic",
        autoDelete: false,
        ...(options.queueArguments ? { arguments: options.queueArguments } : {})
      }],
      bindings: options.bind === false ? [] : [{ exchange, queue, routingKey: "#" }]
    })
    const connection = yield* connect({ topology })
    const raw = yield* rawChannel()
    yield* Effect.addFinalizer(() => Effect.promise(() => raw.deleteQueue(queue).catch(() => undefined)))
    return { exchange, queue, connection, raw }
  })

describe("AmqpPublisher", () => {
  it.live("publishes a batch with confirms in flight: persistent JSON, id, type, headers, traceparent", () =>
    Effect.gen(function*() {
      const { exchange, queue, raw, connection } = yield* setup()
      const publisher = yield* publisherOn(connection, { exchange, appId: "tests" })
      const messages = Array.from({ length: 5000 }, () => message())
      const results = yield* publisher.publish(messages)
      assert.deepStrictEqual(results.map((r) => r._tag), messages.map(() => "Published"))
      assert.deepStrictEqual(results.map((r) => r.id), messages.map((m) => m.id))
      // Confirms were awaited together, not one round trip per message.
      assert.isAbove(yield* publisher.maxInFlight, 100)
      // 5,000 messages overflow amqplib's per-channel write buffer: publishing waited for 'drain'.
      assert.isAbove(yield* publisher.drainWaits, 0)
      assert.strictEqual(yield* publisher.inFlight, 0)
      yield* eventually(
        Effect.map(messageCount(raw, queue), (c) => c === 5000),
        "10 seconds",
        "5,000 messages in the queue"
      )
      const got = yield* drain(raw, queue)
      const first = got[0]!
      const m = messages[0]!
      assert.strictEqual(first.properties.messageId, m.id)
      assert.strictEqual(first.properties.type, "order.placed")
      assert.strictEqual(first.properties.deliveryMode, 2)
      assert.strictEqual(first.properties.contentType, "application/json")
      assert.strictEqual(first.properties.appId, "tests")
      assert.strictEqual(first.fields.routingKey, "order.placed")
      assert.deepStrictEqual(JSON.parse(first.content.toString()), m.payload)
      const h = first.properties.headers!
      assert.strictEqual(h[AmqpPublisher.HeaderNames.version], 2)
      assert.strictEqual(h[AmqpPublisher.HeaderNames.aggregateType], "order")
      assert.strictEqual(h[AmqpPublisher.HeaderNames.aggregateId], m.aggregateId)
      assert.strictEqual(h[AmqpPublisher.HeaderNames.orderingKey], m.orderingKey)
      assert.strictEqual(h[AmqpPublisher.HeaderNames.occurredAt], "2026-11-25T12:00:00.000Z")
      assert.strictEqual(h["traceparent"], traceparent)
      assert.strictEqual(h["x-custom"], "yes")
      assert.deepStrictEqual(new Set(got.map((g) => g.properties.messageId)), new Set(messages.map((x) => x.id)))
    }).pipe(Effect.scoped))

  it.live("an unroutable message (basic.return) is a typed failure for that message only", () =>
    Effect.gen(function*() {
      const { exchange, connection } = yield* setup({ bind: false })
      const results = yield* (yield* publisherOn(connection, { exchange })).publish([message(), message()])
      const errors = rejected(results)
      assert.strictEqual(errors.length, 2)
      for (const e of errors) {
        assert.strictEqual(e._tag, "PublishError")
        assert.include(e.message, "returned")
        assert.include(e.message, "NO_ROUTE")
        assert.isTrue(e.isRetryable, "a consumer queue may be bound later: the relay retries")
      }
      const strict = yield* (yield* publisherOn(connection, { exchange, unroutable: "fail" })).publish([message()])
      assert.isFalse(rejected(strict)[0]!.isRetryable)
    }).pipe(Effect.scoped))

  it.live("routable and unroutable in one batch: each gets its own result", () =>
    Effect.gen(function*() {
      const exchange = unique("pub.x")
      const queue = unique("pub.q")
      const connection = yield* connect({
        topology: Topology.make({
          exchanges: [{ name: exchange, type: "direct", autoDelete: true }],
          queues: [{ name: queue, type: "classic", autoDelete: true }],
          bindings: [{ exchange, queue, routingKey: "order.placed" }]
        })
      })
      const publisher = yield* publisherOn(connection, { exchange })
      const batch = [message("order.placed"), message("nobody.listens"), message("order.placed")]
      const results = yield* publisher.publish(batch)
      assert.deepStrictEqual(results.map((r) => r._tag), ["Published", "Rejected", "Published"])
    }).pipe(Effect.scoped))

  it.live("a broker nack (queue full, reject-publish) is a retryable failure", () =>
    Effect.gen(function*() {
      const { exchange, connection } = yield* setup({
        queueArguments: { "x-max-length": 1, "x-overflow": "reject-publish" }
      })
      const publisher = yield* publisherOn(connection, { exchange })
      const results = yield* publisher.publish([message(), message(), message()])
      assert.strictEqual(results[0]!._tag, "Published")
      const errors = rejected(results)
      assert.strictEqual(errors.length, 2)
      for (const e of errors) {
        assert.include(e.message, "nack")
        assert.isTrue(e.isRetryable)
      }
    }).pipe(Effect.scoped))

  it.live("a channel closed by the broker (missing exchange) fails retryably, then the publisher recovers", () =>
    Effect.gen(function*() {
      const exchange = unique("pub.late")
      const queue = unique("pub.q")
      const connection = yield* connect()
      const publisher = yield* publisherOn(connection, { exchange })
      const first = yield* publisher.publish([message(), message()])
      const errors = rejected(first)
      assert.strictEqual(errors.length, 2)
      for (const e of errors) {
        assert.include(e.message, "closed")
        assert.include(e.message, "404")
        assert.isTrue(e.isRetryable)
      }
      // The exchange appears (a late deploy): the re-opened channel publishes again.
      yield* connection.declare(Topology.make({
        exchanges: [{ name: exchange, autoDelete: true }],
        queues: [{ name: queue, type: "classic", autoDelete: true }],
        bindings: [{ exchange, queue, routingKey: "#" }]
      }))
      yield* eventually(
        Effect.map(publisher.publish([message()]), (r) => r[0]!._tag === "Published").pipe(
          Effect.catch(() => Effect.succeed(false))
        ),
        "10 seconds",
        "a publish on the re-opened channel"
      )
    }).pipe(Effect.scoped))

  it.live("confirm timeout: unconfirmed messages fail retryably instead of hanging", () =>
    Effect.gen(function*() {
      const { exchange, connection } = yield* setup()
      // A 1 ms confirm window cannot be met by a 500-message batch on any machine.
      const publisher = yield* publisherOn(connection, { exchange, confirmTimeout: "1 millis" })
      const results = yield* publisher.publish(Array.from({ length: 500 }, () => message()))
      const errors = rejected(results)
      assert.isAbove(errors.length, 0)
      for (const e of errors) {
        assert.include(e.message, "timeout")
        assert.isTrue(e.isRetryable)
      }
    }).pipe(Effect.scoped))
})
