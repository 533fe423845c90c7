/**
 * graphile-worker and pg-boss moving a backlog into RabbitMQ, as a user would write it: a task (a
 * `work()` handler) that publishes its job on a confirm channel and waits for the broker's confirm.
 * The message is the job's payload (the same order event) with the job id as its message id; the
 * queue is read back afterwards (each job exactly once).
 * @module
 */
import type { ConfirmChannel } from "amqplib"
import { Effect } from "effect"
import { makeWorkerUtils, run, runMigrations } from "graphile-worker"
import pg from "pg"
import { checked, type E2eDrain } from "./endToEnd.ts"
import * as Rabbit from "./lib/rabbit.ts"
import * as Seed from "./lib/seed.ts"
import {
  type GraphileConfig,
  graphilePoolSize,
  type PgBossConfig,
  progress,
  quiet,
  quietLogger,
  schemaName,
  startBoss,
  stopBoss,
  warm
} from "./peers.ts"

/** Publishes one job on `channel` and resolves once the broker confirmed it. */
const publish = (channel: ConfirmChannel, exchange: string, id: string, payload: unknown) =>
  new Promise<void>((resolve, reject) =>
    channel.publish(exchange, Seed.OrderPlaced.type, Buffer.from(JSON.stringify(payload)), {
      persistent: true,
      messageId: id,
      type: Seed.OrderPlaced.type,
      contentType: "application/json"
    }, (error) => (error ? reject(error) : resolve()))
  )

/** graphile-worker: `run()` whose task publishes its job and waits for the confirm. */
export const graphileDrain = (
  url: string,
  rabbitUrl: string,
  events: number,
  c: GraphileConfig
): Effect.Effect<E2eDrain> =>
  Effect.scoped(Effect.gen(function*() {
    const { channel, exchange, queue } = yield* Rabbit.confirmTarget(rabbitUrl, "e2e-gw")
    const schema = schemaName("gwe2e")
    const size = graphilePoolSize(c.concurrency)
    const pool = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const p = new pg.Pool({ connectionString: url, max: size, application_name: "bench-graphile" })
        quiet(p)
        return p
      }),
      (p) =>
        Effect.promise(async () => {
          await p.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
          await p.end().catch(() => undefined)
        })
    )
    const ids: Array<string> = []
    yield* Effect.promise(async () => {
      await runMigrations({ pgPool: pool, schema, logger: quietLogger })
      const utils = await makeWorkerUtils({ pgPool: pool, schema, logger: quietLogger })
      try {
        for (let i = 0; i < events; i += 1_000) {
          const jobs = await utils.addJobs(
            Array.from(
              { length: Math.min(1_000, events - i) },
              (_, k) => ({ identifier: "bench", payload: Seed.input(i + k).payload })
            )
          )
          ids.push(...jobs.map((j) => String(j.id)))
        }
      } finally {
        await utils.release()
      }
      await pool.query(`ANALYZE ${schema}._private_jobs`)
      await warm(pool, size)
    })
    let confirmed = 0
    const start = performance.now()
    yield* Effect.promise(async () => {
      const runner = await run({
        pgPool: pool,
        schema,
        concurrency: c.concurrency,
        noHandleSignals: true,
        logger: quietLogger,
        taskList: {
          bench: async (payload, helpers) => {
            await publish(channel, exchange, String(helpers.job.id), payload)
            confirmed++
          }
        },
        preset: {
          worker: {
            ...(c.localQueue === undefined ? {} : { localQueue: { size: c.localQueue } }),
            ...(c.batchDelay === undefined
              ? {}
              : { completeJobBatchDelay: c.batchDelay, failJobBatchDelay: c.batchDelay })
          }
        }
      })
      await progress(() => confirmed, events, performance.now() + 180_000)
      await runner.stop()
    })
    return yield* checked(rabbitUrl, queue.queue, ids, (performance.now() - start) / 1000)
  }))

/** pg-boss: `work()` whose handler publishes each job of its batch and waits for the confirms. */
export const pgBossDrain = (url: string, rabbitUrl: string, events: number, c: PgBossConfig): Effect.Effect<E2eDrain> =>
  Effect.scoped(Effect.gen(function*() {
    const { channel, exchange, queue } = yield* Rabbit.confirmTarget(rabbitUrl, "e2e-boss")
    const { boss, queue: name, schema } = yield* Effect.acquireRelease(
      Effect.promise(() => startBoss(url, c.fetchers + 2)),
      (b) => Effect.promise(() => stopBoss(b.boss, b.schema))
    )
    const ids = yield* Effect.promise(async () => {
      for (let i = 0; i < events; i += 1_000) {
        await boss.insert(
          name,
          Array.from({ length: Math.min(1_000, events - i) }, (_, k) => ({ data: Seed.input(i + k).payload }))
        )
      }
      const rows = (await boss.getDb().executeSql(`SELECT id::text AS id FROM ${schema}.job WHERE name = $1`, [name]))
        .rows as ReadonlyArray<{ readonly id: string }>
      return rows.map((r) => r.id)
    })
    let confirmed = 0
    const start = performance.now()
    yield* Effect.promise(async () => {
      await boss.work(name, {
        batchSize: c.batch,
        localConcurrency: c.fetchers,
        pollingIntervalSeconds: 0.5,
        burstWhenBatchFull: true
      }, async (jobs) => {
        await Promise.all(jobs.map((j) => publish(channel, exchange, j.id, (j as { readonly data?: unknown }).data)))
        confirmed += jobs.length
      })
      await progress(() => confirmed, events, performance.now() + 180_000)
      await boss.offWork(name, { wait: true })
    })
    return yield* checked(rabbitUrl, queue.queue, ids, (performance.now() - start) / 1000)
  }))
