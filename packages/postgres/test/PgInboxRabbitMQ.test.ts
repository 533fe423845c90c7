/**
 * The inbox with real RabbitMQ consumers in their own processes, on Postgres: every message is
 * delivered twice or more (published twice, retried after a rolled-back failure, redelivered after
 * a consumer was killed between its commit and its ack) and has its effect exactly once; a message
 * whose handling kills the process is dead-lettered after 3 crashes, with the reason in the inbox.
 */
import { assert, describe, it } from "@effect/vitest"
import type { Message } from "@tidings/core/Message"
import * as AmqpPublisher from "@tidings/rabbitmq/AmqpPublisher"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as path from "node:path"
import { freshSchema, pgClientLayer, pgUrl } from "../../../test/support/pg.ts"
import { exited, spawnScript, waitForOutput } from "../../../test/support/processes.ts"
import { tempDir } from "../../../test/support/tempDir.ts"
import { amqpUrl, declareRaw, drain, eventually, rawChannel, unique } from "../../rabbitmq/test/helpers.ts"
import * as PgInboxStore from "../src/PgInboxStore.ts"
import { Numbered, queueOf } from "./fixtures/inboxConsumer.ts"

const script = path.join(import.meta.dirname, "fixtures", "inboxConsumer.ts")

const setup = Effect.gen(function*() {
  const context = yield* Layer.build(pgClientLayer())
  const schema = yield* freshSchema("inboxmq").pipe(Effect.provideContext(context))
  const sql = SqlClient.SqlClient.pipe(Effect.provideContext(context))
  const db = yield* sql
  yield* db`CREATE TABLE ${db(`${schema}.effects`)} (message_id text NOT NULL, n int NOT NULL, pid int NOT NULL)`
  const cq = queueOf(unique("inbox.q"), unique("inbox.x"))
  yield* declareRaw(cq.topology)
  const raw = yield* rawChannel()
  yield* Effect.addFinalizer(() =>
    Effect.promise(async () => {
      for (const q of cq.topology.queues) await raw.deleteQueue(q.name).catch(() => undefined)
      for (const x of cq.topology.exchanges) await raw.deleteExchange(x.name).catch(() => undefined)
    })
  )
  const exchange = cq.topology.exchanges.find((x) => x.type !== "fanout")?.name ?? cq.topology.exchanges[0]!.name
  /** Publishes `copies` identical copies (same message id) of each payload, as the relay would after a lost settle. */
  const publish = (ns: ReadonlyArray<number>, copies: number) =>
    Effect.sync(() => {
      const ids: Array<string> = []
      for (const n of ns) {
        const message: Message = {
          id: crypto.randomUUID(),
          type: Numbered.type,
          version: Numbered.version,
          aggregateType: "test",
          aggregateId: `t-${n}`,
          orderingKey: `t-${n}`,
          payload: { n },
          headers: {},
          occurredAt: new Date()
        }
        const out = AmqpPublisher.toOutgoing(message, { exchange })
        for (let c = 0; c < copies; c++) {
          raw.publish(exchange, out.routingKey, out.content, {
            ...out.options,
            headers: { ...out.options.headers, "test-copy": c }
          })
        }
        ids.push(message.id)
      }
      return ids
    })
  const effects = db<
    { n: number; copies: number; pids: number }
  >`SELECT n, count(*)::int AS copies, count(DISTINCT pid)::int AS pids
    FROM ${db(`${schema}.effects`)} GROUP BY n ORDER BY n`
  const inbox = yield* PgInboxStore.make({ schema }).pipe(Effect.provideContext(context))
  const children: Array<ReturnType<typeof spawnScript>> = []
  yield* Effect.addFinalizer(() => Effect.sync(() => children.forEach((c) => c.exitCode === null && c.kill("SIGKILL"))))
  const spawn = (env: Record<string, string>) => {
    const child = spawnScript(script, {
      TIDINGS_TEST_PG_URL: pgUrl(),
      AMQP_URL: amqpUrl(),
      SCHEMA: schema,
      QUEUE: cq.queue,
      EXCHANGE: exchange,
      ...env
    })
    children.push(child)
    return child
  }
  return { schema, cq, raw, publish, effects, inbox, spawn }
})

/** Polls until `check` holds, at most `ms`. */
const until = <E, R>(check: Effect.Effect<boolean, E, R>, ms: number, what: string) =>
  eventually(check, `${ms} millis`, what)

describe("Inbox with RabbitMQ consumers in child processes", () => {
  it.live("every message delivered twice or more has its effect exactly once (duplicates, retries, a kill between commit and ack)", () =>
    Effect.scoped(
      Effect.gen(function*() {
        const t = yield* setup
        const ns = Array.from({ length: 30 }, (_, i) => i)
        const ids = yield* t.publish(ns, 2)
        const mark = path.join(yield* tempDir("tidings-inbox"), "killed")
        const first = t.spawn({ KILL_AFTER_COMMIT: "7", MARK: mark, FAIL_ONCE: "1" })
        assert.strictEqual(yield* Effect.promise(() => exited(first)), "SIGKILL", first.output())
        assert.isTrue(fs.existsSync(mark))
        // Killed after committing n = 7 and before acking it: the broker redelivers it (and the rest).
        const second = t.spawn({ FAIL_ONCE: "1" })
        yield* Effect.promise(() => waitForOutput(second, "consuming"))
        yield* until(Effect.map(Effect.orDie(t.effects), (rows) => rows.length === ns.length), 20_000, "every effect")
        // Let every remaining copy (duplicates, retries) arrive and be acked as a duplicate.
        yield* until(
          Effect.promise(() => t.raw.checkQueue(t.cq.queue)).pipe(
            Effect.map((q) => q.messageCount === 0 && q.consumerCount === 1)
          ),
          10_000,
          "an empty queue"
        )
        // Every published copy handled (processed or acked as a duplicate) by one process or the other.
        const handled = () =>
          new Set([...`${first.output()}${second.output()}`.matchAll(/^handled (\S+)$/gm)].map((m) => m[1]))
        yield* until(Effect.sync(() => handled().size === ns.length * 2), 20_000, "every copy handled")
        const rows = yield* Effect.orDie(t.effects)
        assert.deepStrictEqual(rows.map((r) => [r.n, r.copies]), ns.map((n) => [n, 1]))
        const seven = (yield* Effect.orDie(t.inbox.get(ids[7]!, "effects")))!
        assert.strictEqual(seven.status, "processed")
        // Its effect was committed by the process that died before acking; the redelivered copies were duplicates.
        assert.strictEqual(seven.crashes, 0)
        const db = yield* SqlClient.SqlClient
        const sevenBy = yield* Effect.orDie(
          db<{ pid: number }>`SELECT pid FROM ${db(`${t.schema}.effects`)} WHERE n = 7`
        )
        assert.deepStrictEqual(sevenBy.map((r) => r.pid), [first.pid])
        // A payload that failed once was rolled back and retried: started twice, its effect once.
        const zero = (yield* Effect.orDie(t.inbox.get(ids[0]!, "effects")))!
        assert.strictEqual(zero.status, "processed")
        assert.isAtLeast(zero.attempts, 2)
        assert.match(zero.lastError ?? "", /^$|Flaky/)
        assert.strictEqual((yield* drain(t.raw, t.cq.deadLetterQueue)).length, 0)
        second.kill("SIGKILL")
      }).pipe(Effect.provide(pgClientLayer()))
    ))

  it.live("a message whose handling kills the consumer process is dead-lettered after 3 crashes; the others are handled", () =>
    Effect.scoped(Effect.gen(function*() {
      const t = yield* setup
      const ns = Array.from({ length: 6 }, (_, i) => i)
      const ids = yield* t.publish(ns, 1)
      const outcomes: Array<number | string> = []
      for (let run = 0; run < 6; run++) {
        const child = t.spawn({ POISON: "3", CONCURRENCY: "1" })
        // Either the process dies on the poison message, or it dead-letters it and handles the rest.
        const settled = Effect.gen(function*() {
          yield* until(
            Effect.map(Effect.orDie(t.effects), (rows) => rows.filter((r) => r.n !== 3).length === 5),
            20_000,
            "the other effects"
          )
          yield* until(
            Effect.promise(() => t.raw.checkQueue(t.cq.deadLetterQueue)).pipe(Effect.map((q) => q.messageCount === 1)),
            20_000,
            "the dead letter"
          )
          return "alive" as const
        })
        const code = yield* Effect.raceFirst(Effect.promise(() => exited(child)), settled)
        outcomes.push(code)
        if (code === "alive") {
          child.kill("SIGKILL")
          break
        }
      }
      assert.deepStrictEqual(outcomes, ["SIGKILL", "SIGKILL", "SIGKILL", "alive"])
      const poison = (yield* Effect.orDie(t.inbox.get(ids[3]!, "effects")))!
      assert.strictEqual(poison.status, "failed")
      assert.match(poison.lastError ?? "", /crash loop: 3 handling attempts started and none finished/)
      // Its writes never committed; every other message has its effect once.
      const rows = yield* Effect.orDie(t.effects)
      assert.deepStrictEqual(rows.map((r) => [r.n, r.copies]), ns.filter((n) => n !== 3).map((n) => [n, 1]))
      const dead = yield* drain(t.raw, t.cq.deadLetterQueue)
      assert.strictEqual(dead[0]?.properties.messageId, ids[3])
    })))
})
