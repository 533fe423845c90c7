/**
 * The broker commands against the test PostgreSQL and RabbitMQ: `tidings dlq list | replay` on a
 * consumer queue's dead letters, and `tidings relay` as a real child process (on the runtime the
 * suite runs on) publishing the outbox to an exchange until SIGTERM, in row mode and in log mode
 * (with `tidings doctor` naming the log group, then its missing member).
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import * as Migrator from "@tidings/postgres/Migrator"
import * as PgLogStore from "@tidings/postgres/PgLogStore"
import * as Topology from "@tidings/rabbitmq/Topology"
import { Effect, Exit, Layer, ManagedRuntime, Scope } from "effect"
import { pgClientLayer, pgUrl, schemaName } from "../../../test/support/pg.ts"
import { currentRuntime, exited, spawnOn, waitForOutput } from "../../../test/support/processes.ts"
import { until } from "../../../test/support/progress.ts"
import { amqpUrl, rawChannel, unique } from "../../rabbitmq/test/helpers.ts"
import { appendEvents, bin, dropSchema, Shipped, stores, target, tidings } from "./support.ts"

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

  it("relay --mode log runs a log group member: publishes the log, doctor names the group, then its missing member", async () => {
    const schema = schemaName("clilog")
    const exchange = unique("cli.log")
    // The producers' side: the log store (4 partitions) with cross-process wake-ups.
    const rt = ManagedRuntime.make(
      PgLogStore.layer({ schema, partitions: 4, notify: true }).pipe(
        Layer.provideMerge(Layer.effectDiscard(Migrator.run({ schema }))),
        Layer.provideMerge(pgClientLayer(pgUrl(), 2))
      )
    )
    cleanup.push(() => dropSchema(schema), () => rt.dispose(), () => channel.deleteExchange(exchange))
    await rt.runPromise(Effect.void)
    const append = (n: number, from: number) =>
      rt.runPromise(OutboxStore.use((store) =>
        store.withTransaction(
          Outbox.appendAll(
            Array.from({ length: n }, (_, i) => Shipped.make({ aggregateId: `k${from + i}`, payload: { n: from + i } }))
          )
        )
      ))
    const args = ["relay", "--mode", "log", "--group", "billing", "--exchange", exchange, "--concurrency", "1"]
    const child = spawnOn(currentRuntime(), bin, args, {
      TIDINGS_PG_URL: pgUrl(),
      TIDINGS_SCHEMA: schema,
      TIDINGS_AMQP_URL: amqpUrl()
    })
    try {
      await waitForOutput(child, "relay running")
      assert.include(
        child.output(),
        `relay running: schema ${schema} log → exchange ${exchange} (log mode, group billing, 1 workers, 4 partitions)`
      )
      const queue = (await channel.assertQueue("", { exclusive: true })).queue
      await channel.bindQueue(queue, exchange, "#")
      const received = new Set<string>()
      await channel.consume(queue, (m: { properties: { messageId?: unknown } } | null) => {
        if (m !== null) received.add(String(m.properties.messageId))
      }, { noAck: true })
      const appended = await append(6, 0)
      await until(`the ${appended.length} events at the queue`, () => received.size === appended.length)
      assert.deepStrictEqual([...received].sort(), appended.map((m) => m.id).sort())
      // The cursors move after the publish: wait for the group to be caught up, then ask the doctor.
      let report = await tidings("doctor", "--json", ...target(schema))
      await until("doctor sees the group caught up", async () => {
        report = await tidings("doctor", "--json", ...target(schema))
        return report.json?.checks?.some((c: { name: string; message: string }) =>
          c.name === "log billing" && c.message.startsWith("1 member, 0 events behind")
        ) === true
      })
      assert.strictEqual(report.code, 0, report.out)
    } finally {
      child.kill("SIGTERM")
    }
    const code = await exited(child)
    assert.include(child.output(), "relay stopped")
    assert.strictEqual(code, currentRuntime() === "deno" ? "SIGTERM" : 0, child.output())
    // Stopped (it left the group): events wait with no member to publish them.
    await append(2, 100)
    const stopped = await tidings("doctor", ...target(schema))
    assert.strictEqual(stopped.code, 1, stopped.out)
    assert.match(
      stopped.out,
      /^FAIL {2}log billing +0 members, 2 events behind: no member is running: is a log relay or consumer of this group running\?$/m
    )
  })

  it("relay: log mode settings are refused in row mode and row mode settings in log mode, by name", async () => {
    const group = await tidings("relay", "--group", "billing", ...target(schemaName("cliflags")), ...broker())
    assert.notStrictEqual(group.code, 0)
    assert.include(group.err, "--group is a log mode setting: add --mode log")
    const ordering = await tidings("relay", "--mode", "log", "--ordering", "per-key", ...target(schemaName("cliflags")))
    assert.notStrictEqual(ordering.code, 0)
    assert.include(ordering.err, "--ordering is a row mode setting: log mode publishes each partition in order")
  })
})
