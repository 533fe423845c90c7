/**
 * The console's dead-letter queue views on the real port: `@tidings/rabbitmq`'s DeadLetters on the
 * test broker, listed in the overview and under /api/dlq, peeked, and replayed into the work queue.
 */
import { describe, expect, it } from "@effect/vitest"
import * as DeadLetters from "@tidings/rabbitmq/DeadLetters"
import * as Topology from "@tidings/rabbitmq/Topology"
import { Effect, Layer, Redacted } from "effect"
import { Hono } from "hono"
import { connectionLayer, rawChannel, unique } from "../../rabbitmq/test/helpers.ts"
import * as Console from "../src/Console.ts"
import * as Runtime from "../src/Runtime.ts"
import { json, waitUntil } from "./support.ts"

const tokenText = "console-dlq-token-0123456789abcdef-01"
const auth = { authorization: `Bearer ${tokenText}` }

describe("Console: RabbitMQ dead-letter queues", () => {
  it.live("lists, peeks and replays a consumer queue's dead letters through the port", () =>
    Effect.gen(function*() {
      const cq = Topology.consumerQueue({
        queue: unique("console.q"),
        exchange: { name: unique("console.x"), autoDelete: true }
      })
      const raw = yield* rawChannel()
      yield* Topology.apply(raw, cq.topology)
      yield* Effect.addFinalizer(() =>
        Effect.promise(async () => {
          for (const q of cq.topology.queues) await raw.deleteQueue(q.name).catch(() => undefined)
          await raw.deleteExchange(cq.deadLetterExchange).catch(() => undefined)
        })
      )
      for (let i = 0; i < 2; i++) {
        raw.sendToQueue(cq.deadLetterQueue, Buffer.from(JSON.stringify({ n: i })), {
          messageId: `dl-${i}`,
          type: "parcel.shipped",
          persistent: true
        })
      }

      const layer = DeadLetters.layer({ queues: [cq] }).pipe(
        Layer.provideMerge(connectionLayer({ name: "console-dlq" }))
      )
      const rt = yield* Effect.acquireRelease(
        Effect.promise(() => Runtime.make(layer)),
        (r) => Effect.promise(() => r.dispose())
      )
      const port: Console.DeadLetterQueues<DeadLetters.DeadLetters> = {
        list: DeadLetters.DeadLetters.use((d) => d.list),
        peek: (queue, limit) => DeadLetters.DeadLetters.use((d) => d.peek(queue, limit)),
        replay: (queue, options) => DeadLetters.DeadLetters.use((d) => d.replay(queue, options))
      }
      const app = new Hono()
      app.route("/console", Console.routes(rt, { auth: Redacted.make(tokenText), deadLetterQueues: port }))
      const get = (path: string) =>
        Effect.promise(async () => (await (await app.request(`/console/api/${path}`, { headers: auth })).json()) as any)

      yield* Effect.promise(() =>
        waitUntil(async () => (await raw.checkQueue(cq.deadLetterQueue)).messageCount === 2, 10_000, "the dead letters")
      )
      const overview = yield* get("overview")
      expect(overview.deadLetterQueues).toEqual({
        error: null,
        queues: [{ name: cq.deadLetterQueue, target: cq.queue, messages: 2, consumers: 0 }]
      })
      expect((yield* get("dlq")).queues[0].messages).toBe(2)
      const peeked = (yield* get(`dlq/${encodeURIComponent(cq.deadLetterQueue)}/messages?limit=5`)).messages
      expect(peeked.map((m: { messageId: string }) => m.messageId).sort()).toEqual(["dl-0", "dl-1"])
      expect(peeked[0].type).toBe("parcel.shipped")

      const replayed = yield* Effect.promise(async () =>
        app.request(`/console/api/dlq/${encodeURIComponent(cq.deadLetterQueue)}/replay`, json({}, { headers: auth }))
      )
      expect(replayed.status).toBe(200)
      expect(yield* Effect.promise(() => replayed.json())).toEqual({ replayed: 2 })
      expect((yield* Effect.promise(() => raw.checkQueue(cq.queue))).messageCount).toBe(2)
      const unknown = yield* Effect.promise(async () =>
        app.request("/console/api/dlq/nope.dlq/messages", { headers: auth })
      )
      expect(unknown.status).toBe(404)
    }).pipe(Effect.scoped))
})
