/**
 * DeadLetters against the test broker: messages a consumer dead-lettered are listed, peeked without
 * being taken, and replayed into the work queue (confirmed before the dead letter is acked), where
 * the consumer handles them with a fresh attempt count; across a reconnect.
 */
import { assert, describe, it } from "@effect/vitest"
import type * as Message from "@tidings/core/Message"
import { Data, Effect, Exit, Scope } from "effect"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import * as AmqpConsumer from "../src/AmqpConsumer.ts"
import * as AmqpPublisher from "../src/AmqpPublisher.ts"
import * as DeadLetters from "../src/DeadLetters.ts"
import * as EventRegistry from "../src/EventRegistry.ts"
import * as Topology from "../src/Topology.ts"
import { connect, eventually, messageCount, OrderPlaced, rawChannel, unique } from "./helpers.ts"

class Refused extends Data.TaggedError("Refused")<{}> {
  get isRetryable() {
    return false
  }
}

describe("DeadLetters", () => {
  it.live("lists, peeks and replays a consumer's dead letters into its work queue; the consumer handles them afresh", () =>
    Effect.gen(function*() {
      const exchange = unique("dl.x")
      const cq = Topology.consumerQueue({
        queue: unique("dl.q"),
        exchange: { name: exchange, autoDelete: true },
        retryDelays: ["200 millis"]
      })
      const connection = yield* connect({ name: "dead-letters-test" })
      const raw = yield* rawChannel()
      yield* Effect.addFinalizer(() =>
        Effect.promise(async () => {
          for (const q of cq.topology.queues) await raw.deleteQueue(q.name).catch(() => undefined)
          await raw.deleteExchange(cq.deadLetterExchange).catch(() => undefined)
        })
      )
      let refusing = true
      const handled: Array<{ readonly id: string | undefined; readonly attempt: number; readonly replayed: unknown }> =
        []
      const consumerScope = yield* Scope.make()
      yield* AmqpConsumer.make({
        name: unique("dl-consumer").replaceAll(".", "-"),
        queue: cq,
        registry: EventRegistry.make([OrderPlaced]),
        handler: (d) =>
          Effect.suspend(() => {
            handled.push({ id: d.messageId, attempt: d.attempt, replayed: d.headers[DeadLetters.replayedHeader] })
            return refusing ? Effect.fail(new Refused()) : Effect.void
          })
      }).pipe(Scope.provide(consumerScope), Effect.provideService(AmqpConnection.AmqpConnection, connection))
      yield* Effect.addFinalizer(() => Scope.close(consumerScope, Exit.void))
      const dead = yield* DeadLetters.make({ queues: [cq] }).pipe(
        Effect.provideService(AmqpConnection.AmqpConnection, connection)
      )

      const ids: Array<string> = []
      for (let i = 0; i < 3; i++) {
        const message: Message.Message = {
          id: crypto.randomUUID(),
          type: "order.placed",
          version: 2,
          aggregateType: "order",
          aggregateId: `o-${i}`,
          orderingKey: `o-${i}`,
          payload: { orderId: `o-${i}`, total: { cents: 100, currency: "EUR" } },
          headers: {},
          occurredAt: new Date()
        }
        const out = AmqpPublisher.toOutgoing(message, { exchange })
        raw.publish(exchange, out.routingKey, out.content, out.options)
        ids.push(message.id)
      }
      yield* eventually(
        Effect.map(messageCount(raw, cq.deadLetterQueue), (n) => n === 3),
        "15 seconds",
        "three dead letters"
      )

      assert.deepStrictEqual(yield* dead.list, [{
        name: cq.deadLetterQueue,
        target: cq.queue,
        messages: 3,
        consumers: 1
      }])
      const peeked = yield* dead.peek(cq.deadLetterQueue, 2)
      assert.deepStrictEqual(peeked.map((m) => m.messageId), ids.slice(0, 2))
      assert.strictEqual(peeked[0]!.type, "order.placed")
      assert.match(peeked[0]!.reason ?? "", new RegExp(`^rejected from ${cq.queue.replaceAll(".", "\\.")}`))
      assert.deepStrictEqual(JSON.parse(peeked[0]!.body), { orderId: "o-0", total: { cents: 100, currency: "EUR" } })
      // A peek leaves them there (the broker requeues them asynchronously).
      yield* eventually(
        Effect.map(messageCount(raw, cq.deadLetterQueue), (n) => n === 3),
        "10 seconds",
        "the peeked messages back in the queue"
      )

      refusing = false
      const progress: Array<[number, number]> = []
      const first = yield* dead.replay(cq.queue, {
        limit: 2,
        onProgress: (done, total) => Effect.sync(() => void progress.push([done, total]))
      })
      assert.strictEqual(first, 2)
      assert.deepStrictEqual(progress, [[0, 2], [1, 2], [2, 2]])
      yield* eventually(
        Effect.sync(() => handled.filter((h) => h.replayed === 1).length === 2),
        "10 seconds",
        "the replayed messages to be handled"
      )
      assert.strictEqual(yield* messageCount(raw, cq.deadLetterQueue), 1)
      const replayed = handled.filter((h) => h.replayed === 1)
      assert.deepStrictEqual(replayed.map((h) => h.attempt), [1, 1], "a fresh attempt count")
      assert.isTrue(replayed.every((h) => ids.includes(h.id!)))

      // After a reconnect the service works again on the new connection's channels.
      yield* connection.restart
      yield* eventually(Effect.map(Effect.exit(dead.list), Exit.isSuccess), "15 seconds", "the list after a reconnect")
      assert.strictEqual(yield* dead.replay(cq.deadLetterQueue), 1)
      yield* eventually(
        Effect.sync(() => handled.filter((h) => h.replayed === 1).length === 3),
        "10 seconds",
        "the last one"
      )
      assert.deepStrictEqual(handled.filter((h) => h.replayed === 1).map((h) => h.id).sort(), [...ids].sort())
      assert.strictEqual(yield* messageCount(raw, cq.deadLetterQueue), 0)
      assert.strictEqual(yield* dead.replay(cq.deadLetterQueue), 0, "nothing left")

      const unknown = yield* Effect.exit(dead.peek("no.such.dlq", 1))
      assert.isTrue(Exit.isFailure(unknown))
      assert.match(String(Exit.isFailure(unknown) ? unknown.cause : ""), /DeadLetterQueueNotFound/)
      assert.strictEqual(DeadLetters.replayedHeader, "tidings-replayed")
      assert.isFalse(Object.values(AmqpPublisher.HeaderNames).includes(DeadLetters.replayedHeader as never))
    }).pipe(Effect.scoped))
})
