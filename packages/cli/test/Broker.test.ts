/**
 * The broker commands against the test PostgreSQL and RabbitMQ: `tidings dlq list | replay` on a
 * consumer queue's dead letters, and `tidings relay` as a real child process (on the runtime the
 * suite runs on) publishing the outbox to an exchange until SIGTERM.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Topology from "@tidings/rabbitmq/Topology"
import { Effect, Exit, Scope } from "effect"
import { pgUrl, schemaName } from "../../../test/support/pg.ts"
import { currentRuntime, exited, spawnOn, waitForOutput } from "../../../test/support/processes.ts"
import { until } from "../../../test/support/progress.ts"
import { amqpUrl, rawChannel, unique } from "../../rabbitmq/test/helpers.ts"
import { appendEvents, bin, dropSchema, Shipped, stores, tidings } from "./support.ts"

const broker = () => ["--amqp-url", amqpUrl()] as const

describe("tidings dlq and relay (RabbitMQ)", () => {
  type Channel = Effect.Success<ReturnType<typeof rawChannel>>
  type GetMessage = Exclude<Awaited<ReturnType<Channel["get"]>>, false>
  const scope = Effect.runSync(Scope.make())
  let channel: Channel
  const cleanup: Array<() => Promise<unknown>> = []
  beforeAll(async () => {
    channel = await Effect.runPromise(rawChannel().pipe(Scope.provide(scope)))
  })
  afterAll(async () => {
    for (const f of cleanup.reverse()) await f().catch(() => undefined)
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })

  it("dlq list shows a consumer queue's dead letters; dlq replay moves them back, with progress", async () => {
    const cq = Topology.consumerQueue({ queue: unique("cli.q"), exchange: { name: unique("cli.x"), autoDelete: true } })
    await Effect.runPromise(Topology.apply(channel, cq.topology))
    cleanup.push(async () => {
      for (const q of cq.topology.queues) await channel.deleteQueue(q.name)
      await channel.deleteExchange(cq.deadLetterExchange)
    })
    for (let i = 0; i < 3; i++) {
      channel.sendToQueue(cq.deadLetterQueue, Buffer.from(JSON.stringify({ n: i })), {
        messageId: `m-${i}`,
        type: "parcel.shipped",
        persistent: true,
        headers: { "tidings-attempt": 8 }
      })
    }
    await channel.checkQueue(cq.deadLetterQueue)

    const listed = await tidings("dlq", "list", "--queue", cq.queue, ...broker())
    assert.strictEqual(listed.code, 0, listed.err)
    assert.match(
      listed.out,
      new RegExp(
        `^DEAD-LETTER QUEUE\\s+MESSAGES\\s+REPLAYS INTO\\s+CONSUMERS\\n${
          cq.deadLetterQueue.replaceAll(".", "\\.")
        }\\s+3\\s+${cq.queue.replaceAll(".", "\\.")}\\s+0`
      )
    )
    const one = await tidings("dlq", "replay", cq.deadLetterQueue, "--limit", "1", ...broker())
    assert.strictEqual(one.code, 0, one.err)
    assert.include(one.out, `replayed 1 message into ${cq.queue}`)
    const rest = await tidings("dlq", "replay", cq.queue, "--json", ...broker())
    assert.deepStrictEqual(rest.json, { replayed: 2 })
    assert.include(rest.err, "replaying [##############################] 100% 2/2")
    const moved: Array<GetMessage> = []
    for (
      let m = await channel.get(cq.queue, { noAck: true });
      m !== false;
      m = await channel.get(cq.queue, { noAck: true })
    ) moved.push(m)
    assert.deepStrictEqual(moved.map((m) => m.properties.messageId).sort(), ["m-0", "m-1", "m-2"])
    assert.isTrue(
      moved.every((m) =>
        m.properties.headers?.["tidings-attempt"] === undefined && m.properties.headers?.["tidings-replayed"] === 1
      ),
      "a fresh attempt count"
    )
    assert.strictEqual((await channel.checkQueue(cq.deadLetterQueue)).messageCount, 0)

    const unknown = await tidings("dlq", "replay", "no.such.queue", ...broker())
    assert.strictEqual(unknown.code, 1)
    const noBroker = await tidings("dlq", "list", "--queue", cq.queue)
    assert.strictEqual(noBroker.code, 1)
    assert.include(noBroker.err, "no broker: pass --amqp-url or set TIDINGS_AMQP_URL")
  })

  it("relay runs as its own process: publishes what the app appends, stops cleanly on SIGTERM", async () => {
    const schema = schemaName("clirelay")
    const exchange = unique("cli.relay")
    const rt = stores(schema)
    cleanup.push(() => dropSchema(schema), () => rt.dispose(), () => channel.deleteExchange(exchange))
    await rt.runPromise(Effect.void)
    const child = spawnOn(currentRuntime(), bin, ["relay", "--exchange", exchange, "--concurrency", "1"], {
      TIDINGS_PG_URL: pgUrl(),
      TIDINGS_SCHEMA: schema,
      TIDINGS_AMQP_URL: amqpUrl()
    })
    try {
      await waitForOutput(child, "relay running")
      assert.include(child.output(), `relay running: schema ${schema} → exchange ${exchange} (1 pollers, unordered)`)
      const queue = (await channel.assertQueue("", { exclusive: true })).queue
      await channel.bindQueue(queue, exchange, "#")
      const appended = await rt.runPromise(
        appendEvents(Array.from({ length: 5 }, (_, n) => Shipped.make({ aggregateId: `r${n}`, payload: { n } })), false)
      )
      const received = new Set<string>()
      await channel.consume(queue, (m: { properties: { messageId?: unknown } } | null) => {
        if (m !== null) received.add(String(m.properties.messageId))
      }, { noAck: true })
      await until(`the ${appended.length} events at the queue`, () => received.size === appended.length)
      assert.deepStrictEqual([...received].sort(), appended.map((m) => m.id).sort())
    } finally {
      child.kill("SIGTERM")
    }
    const code = await exited(child)
    assert.include(child.output(), "relay stopped")
    // Deno's node:child_process reports a child that handled SIGTERM and exited 0 as killed by it.
    assert.strictEqual(code, currentRuntime() === "deno" ? "SIGTERM" : 0, child.output())
  })
})
