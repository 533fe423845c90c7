/**
 * The Postgres job queues people use today, driven the way their documentation describes, for the
 * suite's comparison (`npm run bench` / `npm run bench -- suite`):
 *
 * - `graphile-worker` (`run()` with a task list, a pre-opened `pg.Pool`): default settings with a
 *   `concurrency`, or with its local queue and batched completions (`preset.worker.localQueue`,
 *   `completeJobBatchDelay`, `failJobBatchDelay`), as in its performance page;
 * - `pg-boss` (`fetch(queue, { batchSize })` + `complete(queue, ids)` loops, or `work()` with
 *   `batchSize`, `localConcurrency` and `burstWhenBatchFull`).
 *
 * Every drain seeds the same number of jobs (the benchmark's ~250-byte order event as payload) with
 * the queue's own bulk API (`addJobs`, `insert`) into a fresh schema, runs a no-op handler that
 * records job ids, and is timed from starting the workers until every job is done (completed in
 * the database). Each drain is then checked: every job ran exactly once and nothing is left.
 * @module
 */
import { Logger, makeWorkerUtils, run, runMigrations, type Runner } from "graphile-worker"
import pg from "pg"
import { LatencyTracker } from "./latency.ts"
import { log } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { percentile, round, sorted } from "./lib/stats.ts"

/** How one drain of a peer went. */
export interface Drain {
  /** Jobs done (handler ran and the queue recorded them as completed). */
  readonly events: number
  readonly seconds: number
  readonly eventsPerSecond: number
  /** Handler calls for a job id seen before. */
  readonly duplicates: number
  /**
   * Jobs unaccounted for: not done yet still gone from the queue, or done yet still in it (0
   * expected). Without a cap every job must be done.
   */
  readonly lost: number
  /** The run hit the time cap: the rate is over the jobs done by then. */
  readonly capped: boolean
}

/** graphile-worker settings of a drain. */
export interface GraphileConfig {
  readonly concurrency: number
  /** `preset.worker.localQueue.size`; undefined: no local queue (the default). */
  readonly localQueue?: number
  /** `completeJobBatchDelay` and `failJobBatchDelay` (default -1: off). */
  readonly batchDelay?: number
}

/** pg-boss settings of a drain. */
export interface PgBossConfig {
  /** `fetch`: loops of `fetch` + `complete`; `work`: `boss.work()`. */
  readonly mode: "fetch" | "work"
  /** Concurrent fetch loops (`fetch`), or `localConcurrency` (`work`). */
  readonly fetchers: number
  readonly batch: number
}

/** A short label for tables: `c=24 lq=500 bd=0`. */
export const graphileLabel = (c: GraphileConfig): string =>
  `concurrency ${c.concurrency}${c.localQueue === undefined ? "" : `, localQueue ${c.localQueue}`}${
    c.batchDelay === undefined ? "" : `, batchDelay ${c.batchDelay}`
  }`

export const pgBossLabel = (c: PgBossConfig): string =>
  c.mode === "fetch"
    ? `fetch+complete, ${c.fetchers} loop${c.fetchers === 1 ? "" : "s"}, batch ${c.batch}`
    : `work(), localConcurrency ${c.fetchers}, batch ${c.batch}`

let schemas = 0
/** A unique schema name for a peer's run. */
export const schemaName = (prefix: string) => `bench_${prefix}_${process.pid}_${(schemas++).toString(36)}`

/** graphile-worker's logger, silenced below warnings. */
export const quietLogger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") log(`  graphile-worker ${level}: ${message}`)
})

/** Error handlers on the pool and its clients, as graphile-worker asks (a server going away must not crash us). */
export const quiet = (pool: pg.Pool) => {
  pool.on("error", () => undefined)
  pool.on("connect", (client) => void client.on("error", () => undefined))
}

/** Opens all `size` connections of `pool` now, so that connecting is not measured. */
export const warm = async (pool: pg.Pool, size: number) => {
  const clients = await Promise.all(Array.from({ length: size }, () => pool.connect()))
  for (const c of clients) c.release()
}

/** The job payload: the same order event the outbox rows carry. */
const payload = (i: number) => Seed.input(i).payload

/**
 * Resolves once `n()` reaches `target` (true), or at `deadline` (`performance.now()` time), or after
 * `idleMs` without progress (false).
 */
export const progress = (n: () => number, target: number, deadline: number, idleMs = 20_000): Promise<boolean> =>
  new Promise((resolve) => {
    let last = n()
    let lastChange = performance.now()
    const tick = () => {
      const now = n()
      if (now >= target) return resolve(true)
      if (performance.now() >= deadline) return resolve(false)
      if (now !== last) {
        last = now
        lastChange = performance.now()
      } else if (performance.now() - lastChange > idleMs) {
        return resolve(false)
      }
      setTimeout(tick, 2)
    }
    tick()
  })

/** Ids seen by a handler, with repeats counted. */
class Seen {
  readonly ids = new Set<string>()
  total = 0
  add(id: string) {
    this.total++
    this.ids.add(id)
  }
  get duplicates() {
    return this.total - this.ids.size
  }
}

const drained = (events: number, seen: Seen, left: number, seconds: number): Drain => {
  const capped = seen.ids.size < events
  return {
    events: seen.ids.size,
    seconds: round(seconds, 3),
    eventsPerSecond: Math.round(seen.ids.size / seconds),
    duplicates: seen.duplicates,
    // Capped: every job is either done or still queued. Otherwise: all done, none queued.
    lost: capped ? Math.abs(events - seen.ids.size - left) : left,
    capped
  }
}

const graphileRunner = (
  pool: pg.Pool,
  schema: string,
  c: GraphileConfig,
  task: (id: string) => void
): Promise<Runner> =>
  run({
    pgPool: pool,
    schema,
    concurrency: c.concurrency,
    noHandleSignals: true,
    logger: quietLogger,
    taskList: { bench: async (_payload, helpers) => void task(helpers.job.id) },
    preset: {
      worker: {
        ...(c.localQueue === undefined ? {} : { localQueue: { size: c.localQueue } }),
        ...(c.batchDelay === undefined ? {} : { completeJobBatchDelay: c.batchDelay, failJobBatchDelay: c.batchDelay })
      }
    }
  })

/** Pool size graphile-worker's docs recommend: 10 or concurrency + 2, whichever is larger. */
export const graphilePoolSize = (concurrency: number) => Math.max(10, concurrency + 2)

/**
 * One graphile-worker drain: a fresh schema (`runMigrations`), `events` jobs added with `addJobs`
 * (1,000 per call), then `run()` until the handler saw them all and `runner.stop()` returned (which
 * flushes batched completions); the jobs table must then be empty (graphile-worker deletes
 * completed jobs).
 */
export const graphileDrain = async (
  url: string,
  events: number,
  c: GraphileConfig,
  capSeconds: number
): Promise<Drain> => {
  const schema = schemaName("gw")
  const size = graphilePoolSize(c.concurrency)
  const pool = new pg.Pool({ connectionString: url, max: size, application_name: "bench-graphile" })
  quiet(pool)
  try {
    await runMigrations({ pgPool: pool, schema, logger: quietLogger })
    const utils = await makeWorkerUtils({ pgPool: pool, schema, logger: quietLogger })
    try {
      await pool.query("CHECKPOINT").catch(() => undefined)
      for (let i = 0; i < events; i += 1_000) {
        await utils.addJobs(
          Array.from(
            { length: Math.min(1_000, events - i) },
            (_, k) => ({ identifier: "bench", payload: payload(i + k) })
          )
        )
      }
    } finally {
      await utils.release()
    }
    await pool.query(`ANALYZE ${schema}._private_jobs`)
    await warm(pool, size)
    const seen = new Seen()
    const start = performance.now()
    const runner = await graphileRunner(pool, schema, c, (id) => seen.add(id))
    await progress(() => seen.ids.size, events, start + capSeconds * 1000)
    await runner.stop()
    // stop() can resolve while the last completions (DELETEs) are still in flight: the drain is
    // over when the table holds only the jobs that did not run.
    const left = async () =>
      Number(
        (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}._private_jobs`)).rows[0]?.n ?? 0
      )
    const until = performance.now() + 5_000
    while ((await left()) > events - seen.ids.size && performance.now() < until) {
      await new Promise((r) => setTimeout(r, 2))
    }
    const seconds = (performance.now() - start) / 1000
    return drained(events, seen, await left(), seconds)
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
    await pool.end().catch(() => undefined)
  }
}

/**
 * The part of pg-boss's API used here. pg-boss 12.38.0's own declarations do not type-check
 * (`ResolvedConstructorOptions` is referenced but not exported, and this repository checks library
 * types), so the module is loaded through a specifier TypeScript does not follow, typed by this.
 */
export interface PgBoss {
  on(event: "error", listener: (error: unknown) => void): unknown
  start(): Promise<unknown>
  stop(options: { readonly graceful?: boolean; readonly close?: boolean; readonly timeout?: number }): Promise<void>
  createQueue(name: string, options?: { readonly partition?: boolean }): Promise<void>
  insert(name: string, jobs: ReadonlyArray<{ readonly data?: object }>): Promise<unknown>
  fetch(name: string, options: { readonly batchSize: number }): Promise<ReadonlyArray<{ readonly id: string }>>
  complete(name: string, ids: ReadonlyArray<string>): Promise<unknown>
  work(
    name: string,
    options: {
      readonly batchSize: number
      readonly localConcurrency: number
      readonly pollingIntervalSeconds: number
      readonly burstWhenBatchFull: boolean
    },
    handler: (jobs: ReadonlyArray<{ readonly id: string }>) => Promise<void>
  ): Promise<string>
  offWork(name: string, options: { readonly wait: boolean }): Promise<void>
  getDb(): {
    executeSql(text: string, values?: ReadonlyArray<unknown>): Promise<{ readonly rows: ReadonlyArray<unknown> }>
  }
}
type PgBossConstructor = new(options: {
  readonly connectionString: string
  readonly schema: string
  readonly max: number
  readonly application_name: string
  readonly schedule: boolean
}) => PgBoss
const pgBossModule: string = "pg-boss"
let PgBossClass: PgBossConstructor | undefined
const loadPgBoss = async (): Promise<
  PgBossConstructor
> => (PgBossClass ??= ((await import(pgBossModule)) as { readonly PgBoss: PgBossConstructor }).PgBoss)

/** A pg-boss instance on a fresh schema, with all pool connections open, and its queue created. */
export const startBoss = async (url: string, max: number) => {
  const schema = schemaName("boss")
  const PgBoss = await loadPgBoss()
  const boss = new PgBoss({ connectionString: url, schema, max, application_name: "bench-pgboss", schedule: false })
  boss.on("error", (e: unknown) => log(`  pg-boss error: ${String(e)}`))
  await boss.start()
  const queue = "bench"
  // A dedicated table, as pg-boss recommends for a large queue.
  await boss.createQueue(queue, { partition: true })
  return { boss, schema, queue }
}

export const stopBoss = async (boss: PgBoss, schema: string) => {
  await boss.stop({ graceful: false, close: false, timeout: 1_000 }).catch(() => undefined)
  await boss.getDb().executeSql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
  await boss.stop({ graceful: false, close: true, timeout: 1_000 }).catch(() => undefined)
}

/**
 * One pg-boss drain: a fresh schema, `events` jobs added with `insert` (1,000 per call), then
 * either `fetchers` loops of `fetch(queue, { batchSize })` + `complete(queue, ids)` until a fetch
 * comes back empty, or `work()` until the handler saw every job and `offWork(queue, { wait })`
 * returned. Every job must then be `completed`.
 */
export const pgBossDrain = async (url: string, events: number, c: PgBossConfig, capSeconds: number): Promise<Drain> => {
  const max = c.fetchers + 2
  const { boss, schema, queue } = await startBoss(url, max)
  try {
    const db = boss.getDb()
    await db.executeSql("CHECKPOINT").catch(() => undefined)
    for (let i = 0; i < events; i += 1_000) {
      await boss.insert(
        queue,
        Array.from({ length: Math.min(1_000, events - i) }, (_, k) => ({ data: payload(i + k) }))
      )
    }
    await db.executeSql(`ANALYZE ${schema}.job`)
    await Promise.all(Array.from({ length: max }, () => db.executeSql("SELECT pg_sleep(0.02)")))
    const seen = new Seen()
    const start = performance.now()
    const deadline = start + capSeconds * 1000
    if (c.mode === "fetch") {
      const loop = async () => {
        while (performance.now() < deadline) {
          const jobs = await boss.fetch(queue, { batchSize: c.batch })
          if (jobs.length === 0) return
          for (const j of jobs) seen.add(j.id)
          await boss.complete(queue, jobs.map((j) => j.id))
        }
      }
      await Promise.all(Array.from({ length: c.fetchers }, loop))
    } else {
      await boss.work(queue, {
        batchSize: c.batch,
        localConcurrency: c.fetchers,
        pollingIntervalSeconds: 0.5,
        burstWhenBatchFull: true
      }, async (jobs) => {
        for (const j of jobs) seen.add(j.id)
      })
      await progress(() => seen.ids.size, events, deadline)
      await boss.offWork(queue, { wait: true })
    }
    // As with graphile-worker: done when only the jobs that did not run are left uncompleted.
    const left = async () =>
      Number(
        ((await db.executeSql(`SELECT count(*)::int AS n FROM ${schema}.job WHERE name = $1 AND state <> 'completed'`, [
          queue
        ])).rows[0] as { n: number } | undefined)?.n ?? 0
      )
    const until = performance.now() + 5_000
    while ((await left()) > events - seen.ids.size && performance.now() < until) {
      await new Promise((r) => setTimeout(r, 2))
    }
    const seconds = (performance.now() - start) / 1000
    return drained(events, seen, await left(), seconds)
  } finally {
    await stopBoss(boss, schema)
  }
}

/** Latency of a paced graphile-worker run: `addJob` returned → the task handler started. */
export interface GraphileLatency {
  readonly p50Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  readonly events: number
  readonly achievedRate: number
  readonly lost: number
  readonly duplicates: number
}

/**
 * graphile-worker's add → start latency: `producers` concurrent loops call `addJob` (its own
 * transaction, which NOTIFYs `jobs:insert`) on a schedule of `rate` jobs/s for `warmup + duration`
 * seconds, while a runner with `c` executes a no-op task that stamps each job's start. Latency per
 * job: handler start − `addJob` returned.
 */
export const graphileLatency = async (
  url: string,
  c: GraphileConfig,
  opts: { readonly rate: number; readonly duration: number; readonly warmup: number; readonly producers: number }
): Promise<GraphileLatency> => {
  const schema = schemaName("gwl")
  const size = graphilePoolSize(c.concurrency) + opts.producers
  const pool = new pg.Pool({ connectionString: url, max: size, application_name: "bench-graphile" })
  quiet(pool)
  let runner: Runner | undefined
  try {
    await runMigrations({ pgPool: pool, schema, logger: quietLogger })
    const utils = await makeWorkerUtils({ pgPool: pool, schema, logger: quietLogger })
    await warm(pool, size)
    const tracker = new LatencyTracker()
    runner = await graphileRunner(pool, schema, c, (id) => tracker.received(id, performance.now()))
    const total = Math.round(opts.rate * (opts.warmup + opts.duration))
    const start = performance.now() + 20
    const measuredFrom = start + opts.warmup * 1000
    let measuredCommits = 0
    let lastCommit = measuredFrom
    const producer = async (first: number) => {
      for (let k = first; k < total; k += opts.producers) {
        const target = start + (k * 1000) / opts.rate
        const wait = target - performance.now()
        if (wait > 0) await new Promise((r) => setTimeout(r, wait))
        const job = await utils.addJob("bench", payload(k))
        const at = performance.now()
        const measured = target >= measuredFrom
        tracker.committed(job.id, at, measured)
        if (measured) {
          measuredCommits++
          lastCommit = Math.max(lastCommit, at)
        }
      }
    }
    await Promise.all(Array.from({ length: opts.producers }, (_, i) => producer(i)))
    const until = performance.now() + 10_000
    while (tracker.outstanding > 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 5))
    await utils.release()
    const s = sorted(tracker.latencies)
    return {
      p50Ms: round(percentile(s, 50)),
      p95Ms: round(percentile(s, 95)),
      p99Ms: round(percentile(s, 99)),
      maxMs: round(percentile(s, 100)),
      events: s.length,
      achievedRate: Math.round(measuredCommits / ((lastCommit - measuredFrom) / 1000)),
      lost: tracker.outstanding,
      duplicates: tracker.duplicates
    }
  } finally {
    await runner?.stop().catch(() => undefined)
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
    await pool.end().catch(() => undefined)
  }
}
