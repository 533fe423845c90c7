/**
 * `npm run bench` (or `npm run bench -- suite`): the whole suite on one embedded PostgreSQL (and RabbitMQ
 * when available), every figure the median of `runs` runs, then the report.
 *
 * 1. claim throughput: the database's ceiling, the Tidings relay (unordered and per-key) and a
 *    plain SQL loop over relays × batch sizes, graphile-worker and pg-boss in several documented
 *    configurations, all draining the same number of rows with the same payload;
 * 2. publish latency at paced loads: commit → publish with and without NOTIFY, graphile-worker's
 *    add → start beside it, and commit → RabbitMQ confirm / consumer;
 * 3. bloat: throughput and latency with 1,000,000 published rows awaiting retention, after
 *    retention pruned them, and on a clean table;
 * 4. scale-out: 1, 2 and 4 relay processes on one table.
 *
 * Runs are interleaved (every configuration's first run, then every second run, …) so that drift
 * (other load, checkpoints) spreads over all of them. Results go to `benchmarks/results/<date>.json`
 * and `latest.json`, a Markdown report with SVG charts next to them, and (full runs) the results
 * section of `benchmarks/README.md`.
 * @module
 */
import type { Message } from "@tidings/core/Message"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { Cause, Duration, Effect, Exit, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs/promises"
import * as Claim from "./claim.ts"
import * as Latency from "./latency.ts"
import { parse, Reader, UsageError } from "./lib/cli.ts"
import { loadAverage, machine } from "./lib/machine.ts"
import * as Pg from "./lib/postgres.ts"
import * as Rabbit from "./lib/rabbit.ts"
import { int, log, ms } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { round, summarize } from "./lib/stats.ts"
import {
  type BloatSection,
  type BloatState,
  charts,
  type ClaimRow,
  type ClaimSection,
  type LatencyRow,
  type LatencySection,
  markdown,
  replaceBetween,
  type ScaleSection,
  type SuiteResult,
  type System,
  systems,
  targets,
  type Variant
} from "./lib/suiteReport.ts"
import * as LogSuite from "./logSuite.ts"
import * as Peers from "./peers.ts"
import * as ScaleOut from "./scaleOut.ts"

const phases = ["claim", "latency", "bloat", "scale", "consumer", "e2e"] as const
export type Phase = (typeof phases)[number]

/** Settings of the suite. */
export interface Options {
  readonly quick: boolean
  readonly runs: number
  readonly phases: ReadonlyArray<Phase>
  /** `off`: no RabbitMQ runs even when a broker is available. */
  readonly rabbit: "auto" | "off"
  /** Write results, report and README (false with `--dry-run`). */
  readonly write: boolean
  readonly command: string
  readonly claim: {
    readonly events: number
    readonly capSeconds: number
    readonly relays: ReadonlyArray<number>
    /** Batch sizes of Tidings unordered, per-key and the SQL loop. */
    readonly batches: ReadonlyArray<number>
    /** More batch sizes for Tidings unordered only (small batches are slow: commit-bound). */
    readonly unorderedBatches: ReadonlyArray<number>
    /** Tidings relay settings also run with synchronous bookkeeping commits. */
    readonly sync: ReadonlyArray<{ readonly relays: number; readonly batch: number }>
    readonly graphile: ReadonlyArray<Peers.GraphileConfig>
    readonly pgBoss: ReadonlyArray<Peers.PgBossConfig>
  }
  readonly latency: {
    readonly rates: ReadonlyArray<number>
    readonly wakeups: ReadonlyArray<"notify" | "listen" | "poll">
    readonly rabbitRates: ReadonlyArray<number>
    readonly duration: number
    readonly warmup: number
    readonly graphile: Peers.GraphileConfig
  }
  readonly bloat: {
    readonly rows: number
    readonly events: number
    readonly relays: number
    readonly batch: number
    readonly rate: number
    readonly duration: number
    readonly pruneBatch: number
  }
  readonly scale: {
    readonly processes: ReadonlyArray<number>
    readonly relays: number
    readonly batch: number
    readonly events: number
  }
  /** Log mode's runs in the latency and scale phases, and the consumer and e2e phases. */
  readonly log: LogSuite.LogOptions
}

/** Reads the suite's flags: `--quick`, `--runs`, `--phase`, `--rabbit`, `--events`, `--bloat-rows`, `--dry-run`. */
export const options = (args: Reader, argv: ReadonlyArray<string>): Options => {
  const quick = args.bool("quick")
  const runs = args.number("runs") ?? 3
  if (!Number.isInteger(runs)) throw new UsageError("--runs must be an integer")
  const events = args.number("events")
  const bloatRows = args.number("bloat-rows")
  return {
    quick,
    runs,
    phases: args.choices("phase", phases) ?? phases,
    rabbit: args.choices("rabbit", ["auto", "off"] as const)?.[0] ?? "auto",
    write: !args.bool("dry-run"),
    command: argv.length === 0 ? "npm run bench" : `npm run bench -- ${argv.join(" ")}`,
    claim: quick
      ? {
        events: Math.round(events ?? 5_000),
        capSeconds: 3,
        relays: [1, 4],
        batches: [100, 1_000],
        unorderedBatches: [],
        sync: [{ relays: 4, batch: 1_000 }],
        graphile: [{ concurrency: 24 }, { concurrency: 24, localQueue: 500, batchDelay: 0 }],
        pgBoss: [{ mode: "fetch", fetchers: 4, batch: 1_000 }, { mode: "work", fetchers: 4, batch: 1_000 }]
      }
      : {
        events: Math.round(events ?? 40_000),
        capSeconds: 4,
        relays: [1, 2, 4, 8],
        batches: [100, 1_000],
        unorderedBatches: [10, 5_000],
        sync: [{ relays: 2, batch: 1_000 }, { relays: 4, batch: 1_000 }],
        // Default settings at two concurrencies, then the local queue and batched completions of
        // graphile-worker's performance page (concurrency 24, localQueue 500, batch delay 0) and
        // larger local queues (faster still in our tries).
        graphile: [
          { concurrency: 8 },
          { concurrency: 24 },
          { concurrency: 24, localQueue: 500, batchDelay: 0 },
          { concurrency: 8, localQueue: 2_000, batchDelay: 0 },
          { concurrency: 24, localQueue: 2_000, batchDelay: 0 }
        ],
        // fetch + complete loops (the batch API) and work() with batches.
        pgBoss: [
          { mode: "fetch", fetchers: 1, batch: 1_000 },
          { mode: "fetch", fetchers: 4, batch: 100 },
          { mode: "fetch", fetchers: 4, batch: 1_000 },
          { mode: "fetch", fetchers: 8, batch: 1_000 },
          { mode: "work", fetchers: 4, batch: 1_000 }
        ]
      },
    latency: {
      rates: quick ? [1_000] : [200, 500, 1_000],
      wakeups: ["notify", "listen", "poll"],
      rabbitRates: [1_000],
      duration: quick ? 1.5 : 8,
      warmup: quick ? 0.5 : 1,
      // graphile-worker's performance-page settings: its best add → start latency in our tries.
      graphile: { concurrency: 24, localQueue: 500, batchDelay: 0 }
    },
    bloat: {
      rows: Math.round(bloatRows ?? (quick ? 50_000 : 1_000_000)),
      events: quick ? 3_000 : 40_000,
      relays: 4,
      batch: 100,
      rate: 1_000,
      duration: quick ? 1.5 : 8,
      pruneBatch: 10_000
    },
    // --quick: batch 100, so that 4 processes × 2 relays still share the few events.
    scale: { processes: [1, 2, 4], relays: 2, batch: quick ? 100 : 500, events: quick ? 5_000 : 40_000 },
    log: LogSuite.options(quick)
  }
}

/** A step of the suite: what it does, a guess of its seconds (for the progress display), and the work. */
export interface Step {
  readonly label: string
  readonly estimate: number
  readonly run: Effect.Effect<void, never, Scope.Scope>
}

const clock = (seconds: number) => `${Math.floor(seconds / 60)}:${String(Math.floor(seconds % 60)).padStart(2, "0")}`

/** Runs `steps` in order with a progress line per step on stderr; a failing step is reported and skipped. */
const runSteps = (steps: ReadonlyArray<Step>, problems: Array<string>) =>
  Effect.gen(function*() {
    const total = steps.reduce((n, s) => n + s.estimate, 0)
    const started = performance.now()
    let estimated = 0
    for (const [i, step] of steps.entries()) {
      const elapsed = (performance.now() - started) / 1000
      const left = estimated > 0 ? ((total - estimated) * elapsed) / estimated : total
      log(
        `[${String(i + 1).padStart(String(steps.length).length)}/${steps.length} ${clock(elapsed)} elapsed, ~${
          clock(left)
        } left] ${step.label}`
      )
      const exit = yield* Effect.exit(step.run)
      if (Exit.isFailure(exit)) {
        const message = `${step.label}: failed: ${Cause.pretty(exit.cause).split("\n").slice(0, 3).join(" ")}`
        log(`  ! ${message}`)
        problems.push(message)
      }
      estimated += step.estimate
    }
  })

/** Per-configuration samples of the claim phase, in plan order. */
interface ClaimEntry {
  readonly system: System | Variant
  readonly config: string
  readonly relays?: number
  readonly batch?: number
  readonly samples: Array<
    { readonly eventsPerSecond: number; readonly capped: boolean; readonly duplicates: number; readonly lost: number }
  >
}

const relayConfig = (relays: number, batch: number) => `relays ${relays}, batch ${batch}`

/** The claim phase's steps; `result()` builds its section once they ran. */
const claimPhase = (url: () => string, opts: Options, problems: Array<string>) => {
  const o = opts.claim
  const entries = new Map<string, ClaimEntry>()
  const entry = (key: string, e: Omit<ClaimEntry, "samples">) => {
    if (!entries.has(key)) entries.set(key, { ...e, samples: [] })
    return entries.get(key)!
  }
  let msgs: ReadonlyArray<Message> = []
  const record = (
    key: string,
    e: Omit<ClaimEntry, "samples">,
    r: { eventsPerSecond: number; capped: boolean; duplicates: number; lost?: number }
  ) => {
    entry(key, e).samples.push({
      eventsPerSecond: r.eventsPerSecond,
      capped: r.capped,
      duplicates: r.duplicates,
      lost: r.lost ?? 0
    })
    if (r.duplicates > 0 || (r.lost ?? 0) > 0) {
      problems.push(`claim ${e.system} (${e.config}): ${r.duplicates} duplicates, ${r.lost ?? 0} lost`)
    }
    log(`    ${e.system} ${e.config}: ${int(r.eventsPerSecond)} events/s${r.capped ? " (capped)" : ""}`)
  }
  const tidingsOrderings = [
    ["tidings-unordered", "unordered"],
    ["tidings-per-key", "per-key"],
    ["tidings-log", "log"],
    ["sql-loop", "sql-loop"]
  ] as const
  const perRun = (eventsPerSecond: number) => Math.min(o.capSeconds, o.events / eventsPerSecond) + 0.6
  const seed = o.events / 20_000
  const steps: Array<Step> = []
  steps.push({
    label: `claim: encode ${int(o.events)} events; warm-up drains (not measured)`,
    estimate: 8,
    run: Effect.gen(function*() {
      msgs = yield* Seed.messages(o.events)
      const warm = msgs.slice(0, Math.min(5_000, msgs.length))
      for (const ordering of ["unordered", "per-key", "log", "sql-loop"] as const) {
        yield* Claim.measure(url(), { ordering, table: "clean", relays: 4, batch: 100 }, warm, o.capSeconds, "layer")
      }
      yield* Effect.promise(() => Peers.graphileDrain(url(), 2_000, { concurrency: 8 }, o.capSeconds))
      yield* Effect.promise(() =>
        Peers.pgBossDrain(url(), 2_000, { mode: "fetch", fetchers: 1, batch: 100 }, o.capSeconds)
      )
    })
  })
  for (let run = 1; run <= opts.runs; run++) {
    const tag = `claim run ${run}/${opts.runs}`
    steps.push({
      label: `${tag}: ceiling (one statement claims all rows, one marks them)`,
      estimate: seed + 1.5,
      run: Effect.gen(function*() {
        const r = yield* Claim.ceiling(url(), msgs)
        record("ceiling", { system: "ceiling", config: "2 statements" }, {
          ...r,
          capped: false,
          duplicates: 0,
          lost: r.events === msgs.length ? 0 : msgs.length - r.events
        })
      })
    })
    for (const relays of o.relays) {
      for (const batch of [...o.unorderedBatches, ...o.batches].sort((a, b) => a - b)) {
        const orderings = o.batches.includes(batch) ? tidingsOrderings : tidingsOrderings.slice(0, 1)
        steps.push({
          label: `${tag}: ${orderings.map(([system]) => system).join(" / ")}, ${relayConfig(relays, batch)}`,
          estimate: orderings.length * (seed + perRun(batch <= 10 ? 3_000 : 20_000)),
          run: Effect.gen(function*() {
            for (const [system, ordering] of orderings) {
              const r = yield* Claim.measure(
                url(),
                { ordering, table: "clean", relays, batch },
                msgs,
                o.capSeconds,
                "layer"
              )
              record(`${system}/${relays}/${batch}`, { system, config: relayConfig(relays, batch), relays, batch }, r)
            }
          })
        })
      }
    }
    for (const { relays, batch } of o.sync) {
      steps.push({
        label: `${tag}: tidings unordered with synchronous bookkeeping commits, ${relayConfig(relays, batch)}`,
        estimate: seed + perRun(20_000),
        run: Effect.gen(function*() {
          const r = yield* Claim.measure(
            url(),
            { ordering: "unordered-sync", table: "clean", relays, batch },
            msgs,
            o.capSeconds,
            "layer"
          )
          record(`sync/${relays}/${batch}`, {
            system: "tidings-unordered-sync",
            config: `${relayConfig(relays, batch)}, bookkeepingCommit sync`,
            relays,
            batch
          }, r)
        })
      })
    }
    for (const c of o.graphile) {
      steps.push({
        label: `${tag}: graphile-worker, ${Peers.graphileLabel(c)}`,
        estimate: 1.5 + seed * 2 + perRun(c.localQueue === undefined ? 2_000 : 20_000),
        run: Effect.gen(function*() {
          const r = yield* Effect.promise(() => Peers.graphileDrain(url(), o.events, c, o.capSeconds))
          record(`gw/${Peers.graphileLabel(c)}`, { system: "graphile-worker", config: Peers.graphileLabel(c) }, r)
        })
      })
    }
    for (const c of o.pgBoss) {
      steps.push({
        label: `${tag}: pg-boss, ${Peers.pgBossLabel(c)}`,
        estimate: 1.5 + seed * 2 + perRun(c.batch >= 1_000 ? 15_000 : 8_000),
        run: Effect.gen(function*() {
          const r = yield* Effect.promise(() => Peers.pgBossDrain(url(), o.events, c, o.capSeconds))
          record(`boss/${Peers.pgBossLabel(c)}`, { system: "pg-boss", config: Peers.pgBossLabel(c) }, r)
        })
      })
    }
  }
  const result = (): ClaimSection => {
    const rows: Array<ClaimRow> = [...entries.values()].map((e) => ({
      system: e.system,
      config: e.config,
      ...(e.relays === undefined ? {} : { relays: e.relays }),
      ...(e.batch === undefined ? {} : { batch: e.batch }),
      eventsPerSecond: summarize(e.samples.map((s) => s.eventsPerSecond), 0),
      capped: e.samples.some((s) => s.capped),
      duplicates: e.samples.reduce((n, s) => n + s.duplicates, 0),
      lost: e.samples.reduce((n, s) => n + s.lost, 0)
    }))
    const bestRow = (system: string) =>
      rows.filter((r) => r.system === system && Number.isFinite(r.eventsPerSecond.median))
        .reduce<ClaimRow | undefined>(
          (a, r) => (a === undefined || r.eventsPerSecond.median > a.eventsPerSecond.median ? r : a),
          undefined
        )
    const best = Object.fromEntries(systems.map((s) => [s, bestRow(s)?.eventsPerSecond.median ?? 0])) as Record<
      System,
      number
    >
    const bestOf = Object.fromEntries([...systems, "tidings-unordered-sync"].flatMap((s) => {
      const r = bestRow(s)
      return r === undefined ? [] : [[s, { config: r.config, min: r.eventsPerSecond.min, max: r.eventsPerSecond.max }]]
    }))
    const sync = bestRow("tidings-unordered-sync")
    return {
      events: o.events,
      capSeconds: o.capSeconds,
      rows,
      best,
      bestOf,
      variants: sync === undefined ? {} : { "tidings-unordered-sync": sync.eventsPerSecond.median }
    }
  }
  return { steps, result }
}

/** Median / min / max of each percentile over runs, as a latency row. */
const latencyRow = (
  key: Omit<LatencyRow, "p50" | "p95" | "p99" | "max" | "achievedRate" | "events" | "lost" | "duplicates">,
  runs: ReadonlyArray<
    {
      p50Ms: number
      p95Ms: number
      p99Ms: number
      maxMs: number
      achievedRate: number
      events: number
      lost: number
      duplicates?: number
    }
  >
): LatencyRow => ({
  ...key,
  p50: summarize(runs.map((r) => r.p50Ms)),
  p95: summarize(runs.map((r) => r.p95Ms)),
  p99: summarize(runs.map((r) => r.p99Ms)),
  max: summarize(runs.map((r) => r.maxMs)),
  achievedRate: summarize(runs.map((r) => r.achievedRate), 0),
  events: runs.reduce((n, r) => n + r.events, 0),
  lost: runs.reduce((n, r) => n + r.lost, 0),
  duplicates: runs.reduce((n, r) => n + (r.duplicates ?? 0), 0)
})

type LatencySample = Parameters<typeof latencyRow>[1][number]

/** Latency options for paced runs of `duration` seconds (after `warmup`). */
const latencyOptions = (base: Latency.Options, duration: number, warmup: number): Latency.Options => ({
  ...base,
  duration,
  warmup
})

const latencyPhase = (
  url: () => string,
  rabbitUrl: () => string | undefined,
  base: Latency.Options,
  opts: Options,
  problems: Array<string>
) => {
  const o = opts.latency
  const lopts = latencyOptions(base, o.duration, o.warmup)
  const samples = new Map<string, { key: Parameters<typeof latencyRow>[0]; runs: Array<LatencySample> }>()
  const add = (key: Parameters<typeof latencyRow>[0], r: LatencySample) => {
    const k = `${key.system}/${key.mode}/${key.transport}/${key.target}/${key.rate}`
    if (!samples.has(k)) samples.set(k, { key, runs: [] })
    samples.get(k)!.runs.push(r)
    if (r.lost > 0 || (r.duplicates ?? 0) > 0) {
      problems.push(`latency ${k}: ${r.lost} lost, ${r.duplicates ?? 0} duplicates`)
    }
    log(
      `    ${key.system} ${key.mode} ${key.transport} → ${key.target} at ${key.rate}/s: p50 ${ms(r.p50Ms)} ms, p95 ${
        ms(r.p95Ms)
      } ms, p99 ${ms(r.p99Ms)} ms (achieved ${int(r.achievedRate)}/s)`
    )
  }
  const runSeconds = o.duration + o.warmup + 1.5
  const steps: Array<Step> = []
  for (let run = 1; run <= opts.runs; run++) {
    for (const rate of o.rates) {
      steps.push({
        label: `latency run ${run}/${opts.runs}: ${int(rate)} events/s, tidings ${
          o.wakeups.join(" / ")
        } and graphile-worker`,
        estimate: (o.wakeups.length + 1) * runSeconds,
        run: Effect.gen(function*() {
          for (const wakeup of o.wakeups) {
            const { runs } = yield* Latency.paced(url(), undefined, { transport: "memory", wakeup, rate }, lopts)
            for (const r of runs) {
              add({ system: "tidings", mode: wakeup, transport: "memory", target: "publish", rate }, r)
            }
          }
          const g = yield* Effect.promise(() =>
            Peers.graphileLatency(url(), o.graphile, {
              rate,
              duration: o.duration,
              warmup: o.warmup,
              producers: lopts.producers
            })
          )
          add({ system: "graphile-worker", mode: "add→start", transport: "postgres", target: "start", rate }, g)
        })
      })
    }
    for (const rate of o.rabbitRates) {
      steps.push({
        label: `latency run ${run}/${opts.runs}: ${
          int(rate)
        } events/s through RabbitMQ (classic queue), confirm and consumer`,
        estimate: runSeconds + 1,
        run: Effect.gen(function*() {
          const broker = rabbitUrl()
          if (broker === undefined) return
          const { runs } = yield* Latency.paced(url(), broker, {
            transport: "rabbitmq",
            wakeup: "notify",
            rate,
            queue: "classic",
            relay: "tidings"
          }, lopts)
          for (const r of runs) {
            add(
              { system: "tidings", mode: "notify", transport: "rabbitmq", target: r.target, rate },
              r as LatencySample
            )
          }
        })
      })
    }
  }
  const result = (rabbitNote: string | undefined): LatencySection => ({
    durationSeconds: o.duration,
    warmupSeconds: o.warmup,
    relays: lopts.relays,
    producers: lopts.producers,
    batch: lopts.batchSize,
    graphile: Peers.graphileLabel(o.graphile),
    rows: [...samples.values()].map(({ key, runs }) => latencyRow(key, runs))
      .sort((a, b) =>
        (a.transport === "rabbitmq" ? 1 : 0) - (b.transport === "rabbitmq" ? 1 : 0) ||
        a.system.localeCompare(b.system) || a.mode.localeCompare(b.mode) || a.target.localeCompare(b.target) ||
        a.rate - b.rate
      ),
    ...(rabbitNote === undefined ? {} : { rabbitmq: rabbitNote })
  })
  return { steps, result }
}

/**
 * `count` published rows, a day old and more (UUIDv7 ids from their timestamps, so they sort before
 * every new row), written by set-based statements in 4 slices at once: what a busy outbox holds
 * between retention runs.
 */
const insertPublished = (schema: string, count: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const key = sql.literal(`'order-' || (g % ${Seed.aggregates})`)
    const slices = 4
    const per = Math.ceil(count / slices)
    yield* Effect.forEach(Array.from({ length: slices }, (_, i) => i), (i) =>
      sql`INSERT INTO ${
        sql(`${schema}.outbox`)
      } (id, aggregate_type, aggregate_id, ordering_key, event_type, event_version,
          payload, occurred_at, available_at, created_at, status, attempts, finished_attempts, published_at)
        SELECT
          encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send(
            (extract(epoch FROM t.at) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid,
          'order', ${key}, ${key}, ${Seed.OrderPlaced.type}, 1,
          jsonb_build_object('orderId', ${key}, 'customerId', 'customer-' || (g % 97), 'totalCents', 1000 + g % 9000, 'currency', 'EUR',
            'lines', jsonb_build_array(jsonb_build_object('sku', 'sku-' || (g % 31), 'quantity', 1 + g % 3, 'priceCents', 500 + g % 700),
                                       jsonb_build_object('sku', 'sku-' || (g % 17), 'quantity', 1, 'priceCents', 250))),
          t.at, t.at, t.at, 'published', 1, 1, t.at + interval '20 milliseconds'
        FROM generate_series(${i * per + 1}::int, ${Math.min(count, (i + 1) * per)}::int) AS g,
          LATERAL (SELECT now() - interval '2 days' + g * interval '10 milliseconds' AS at) AS t`, {
      concurrency: slices,
      discard: true
    })
  }).pipe(Effect.orDie)

const tableMiB = (schema: string) =>
  SqlClient.SqlClient.use((sql) =>
    sql<{ bytes: string }>`SELECT pg_total_relation_size(${`${schema}.outbox`}::regclass)::text AS bytes`
  ).pipe(
    Effect.map(([r]) => round(Number(r?.bytes ?? 0) / 1024 ** 2, 1)),
    Effect.orDie
  )

const bloatPhase = (url: () => string, base: Latency.Options, opts: Options, problems: Array<string>) => {
  const o = opts.bloat
  const lopts = latencyOptions(base, o.duration, 1)
  const plan: Claim.Plan = { ordering: "unordered", table: "clean", relays: o.relays, batch: o.batch }
  const capSeconds = 30
  let scope: Scope.Closeable | undefined
  let schema = ""
  let context: Effect.Success<ReturnType<typeof Pg.openPool>> | undefined
  let cleanMsgs: ReadonlyArray<Message> = []
  const throughput: Record<BloatState, Array<number>> = { clean: [], bloated: [], "after-retention": [] }
  const latency: Record<BloatState, Array<{ p50Ms: number; p95Ms: number; p99Ms: number }>> = {
    clean: [],
    bloated: [],
    "after-retention": []
  }
  let seedSeconds = 0
  let prune = { rows: 0, seconds: 0, batch: o.pruneBatch }
  let vacuumSeconds = 0
  const size = { bloated: 0, afterRetention: 0 }
  let lost = 0
  let duplicates = 0
  const check = (what: string, r: { duplicates: number; lost?: number }) => {
    duplicates += r.duplicates
    lost += r.lost ?? 0
    if (r.duplicates > 0 || (r.lost ?? 0) > 0) {
      problems.push(`bloat ${what}: ${r.duplicates} duplicates, ${r.lost ?? 0} lost`)
    }
  }
  /** A drain of fresh pending rows in the bloated table, with its own pool. */
  const drainBloated = Effect.scoped(Effect.gen(function*() {
    const msgs = yield* Seed.messages(o.events)
    const ctx = yield* Pg.openPool(url(), o.relays + 2)
    return yield* Effect.gen(function*() {
      const store = yield* PgOutboxStore.make({ schema }).pipe(Effect.orDie)
      const history = (yield* Claim.counts(schema)).get("published") ?? 0
      yield* Pg.checkpoint
      yield* Seed.insertPending(store, msgs)
      yield* Pg.analyze(schema)
      return yield* Claim.drain(schema, store, plan, msgs.length, history, capSeconds, "layer")
    }).pipe(Effect.provideContext(ctx))
  }))
  const measureThroughput = (state: BloatState) =>
    Effect.gen(function*() {
      const r = state === "clean"
        ? yield* Claim.measure(url(), plan, cleanMsgs, capSeconds, "layer")
        : yield* drainBloated
      throughput[state].push(r.eventsPerSecond)
      check(`${state} throughput`, r)
      log(`    ${state}: ${int(r.eventsPerSecond)} events/s`)
    })
  const measureLatency = (state: BloatState) =>
    Effect.gen(function*() {
      const { runs } = yield* Latency.paced(
        url(),
        undefined,
        { transport: "memory", wakeup: "notify", rate: o.rate },
        lopts,
        state === "clean" ? undefined : schema
      )
      const r = runs[0]!
      latency[state].push(r)
      check(`${state} latency`, { duplicates: 0, lost: r.lost })
      log(`    ${state}: p50 ${ms(r.p50Ms)} ms, p95 ${ms(r.p95Ms)} ms, p99 ${ms(r.p99Ms)} ms`)
    })
  const drainSeconds = 1 + (o.events / 20_000) * 2
  const latencySeconds = o.duration + 2.5
  const steps: Array<Step> = []
  steps.push({
    label: `bloat: a table with ${int(o.rows)} published rows (insert, VACUUM ANALYZE)`,
    estimate: 2 + o.rows / 60_000,
    run: Effect.gen(function*() {
      scope = yield* Scope.make()
      context = yield* Pg.openPool(url(), 6).pipe(Scope.provide(scope))
      cleanMsgs = yield* Seed.messages(o.events)
      yield* Effect.gen(function*() {
        schema = yield* Pg.freshSchema("bloat").pipe(Scope.provide(scope!))
        const started = performance.now()
        yield* insertPublished(schema, o.rows)
        seedSeconds = round((performance.now() - started) / 1000, 1)
        yield* SqlClient.SqlClient.use((sql) => sql`VACUUM (ANALYZE) ${sql(`${schema}.outbox`)}`).pipe(Effect.orDie)
        size.bloated = yield* tableMiB(schema)
        log(`    ${int(o.rows)} rows in ${seedSeconds} s, ${size.bloated} MiB`)
      }).pipe(Effect.provideContext(context))
    })
  })
  for (let run = 1; run <= opts.runs; run++) {
    steps.push({
      label:
        `bloat run ${run}/${opts.runs}: throughput, clean vs bloated table (relays ${o.relays}, batch ${o.batch}, ${
          int(o.events)
        } events)`,
      estimate: 2 * drainSeconds,
      run: Effect.gen(function*() {
        yield* measureThroughput("clean")
        yield* measureThroughput("bloated")
      })
    })
  }
  for (let run = 1; run <= opts.runs; run++) {
    steps.push({
      label: `bloat run ${run}/${opts.runs}: latency at ${int(o.rate)} events/s, clean vs bloated table`,
      estimate: 2 * latencySeconds,
      run: Effect.gen(function*() {
        yield* measureLatency("clean")
        yield* measureLatency("bloated")
      })
    })
  }
  steps.push({
    label: `bloat: retention (OutboxStore.prune, ${int(o.pruneBatch)} rows per statement), then VACUUM`,
    estimate: 2 + o.rows / 50_000,
    run: Effect.gen(function*() {
      yield* Effect.gen(function*() {
        const store = yield* PgOutboxStore.make({ schema }).pipe(Effect.orDie)
        const started = performance.now()
        let rows = 0
        while (true) {
          // Everything older than an hour: the seeded rows, not the events the runs just published.
          const n = yield* store.prune({ olderThan: Duration.hours(1), limit: o.pruneBatch }).pipe(Effect.orDie)
          if (n === undefined || n === 0) break
          rows += n
        }
        prune = { rows, seconds: round((performance.now() - started) / 1000, 2), batch: o.pruneBatch }
        const vacuumStarted = performance.now()
        yield* SqlClient.SqlClient.use((sql) => sql`VACUUM (ANALYZE) ${sql(`${schema}.outbox`)}`).pipe(Effect.orDie)
        vacuumSeconds = round((performance.now() - vacuumStarted) / 1000, 2)
        size.afterRetention = yield* tableMiB(schema)
        log(`    pruned ${int(rows)} rows in ${prune.seconds} s, VACUUM ${vacuumSeconds} s, ${size.afterRetention} MiB`)
        if (rows < o.rows) problems.push(`bloat: retention pruned ${rows} of ${o.rows} rows`)
      }).pipe(Effect.provideContext(context!))
    })
  })
  for (let run = 1; run <= opts.runs; run++) {
    steps.push({
      label: `bloat run ${run}/${opts.runs}: throughput and latency after retention`,
      estimate: drainSeconds + latencySeconds,
      run: Effect.gen(function*() {
        yield* measureThroughput("after-retention")
        yield* measureLatency("after-retention")
      })
    })
  }
  steps.push({
    label: "bloat: drop the table",
    estimate: 1,
    run: Effect.suspend(() => (scope === undefined ? Effect.void : Scope.close(scope, Exit.void)))
  })
  const result = (): BloatSection => {
    const lat = (state: BloatState) => ({
      p50: summarize(latency[state].map((r) => r.p50Ms)),
      p95: summarize(latency[state].map((r) => r.p95Ms)),
      p99: summarize(latency[state].map((r) => r.p99Ms))
    })
    return {
      rows: o.rows,
      seedSeconds,
      tableSizeMiB: size,
      prune,
      vacuumSeconds,
      relays: o.relays,
      batch: o.batch,
      events: o.events,
      rate: o.rate,
      throughput: {
        clean: summarize(throughput.clean, 0),
        bloated: summarize(throughput.bloated, 0),
        "after-retention": summarize(throughput["after-retention"], 0)
      },
      latency: { clean: lat("clean"), bloated: lat("bloated"), "after-retention": lat("after-retention") },
      lost,
      duplicates
    }
  }
  return { steps, result }
}

const scalePhase = (url: () => string, opts: Options, problems: Array<string>) => {
  const o = opts.scale
  let msgs: ReadonlyArray<Message> = []
  const samples = new Map<number, Array<ScaleOut.ScaleRun>>()
  const steps: Array<Step> = []
  for (let run = 1; run <= opts.runs; run++) {
    for (const processes of o.processes) {
      steps.push({
        label: `scale-out run ${run}/${opts.runs}: ${processes} relay process${
          processes === 1 ? "" : "es"
        } (${o.relays} relays each, batch ${o.batch})`,
        estimate: 2 + processes * 0.7 + o.events / 15_000,
        run: Effect.gen(function*() {
          if (msgs.length === 0) msgs = yield* Seed.messages(o.events)
          const r = yield* ScaleOut.run(url(), processes, o.relays, o.batch, msgs)
          samples.set(processes, [...(samples.get(processes) ?? []), r])
          if (r.duplicates > 0 || r.lost > 0) {
            problems.push(`scale-out ${processes} processes: ${r.duplicates} duplicates, ${r.lost} lost`)
          }
          log(
            `    ${processes} process${processes === 1 ? "" : "es"}: ${int(r.eventsPerSecond)} events/s, per process ${
              r.perProcess.map(int).join(" / ")
            }, ${r.duplicates} duplicates`
          )
        })
      })
    }
  }
  const result = (): ScaleSection => ({
    relaysPerProcess: o.relays,
    batch: o.batch,
    events: o.events,
    rows: o.processes.filter((p) => samples.has(p)).map((processes) => {
      const runs = samples.get(processes)!
      return {
        processes,
        eventsPerSecond: summarize(runs.map((r) => r.eventsPerSecond), 0),
        duplicates: runs.reduce((n, r) => n + r.duplicates, 0),
        lost: runs.reduce((n, r) => n + r.lost, 0),
        perProcess: runs[runs.length - 1]!.perProcess
      }
    })
  })
  return { steps, result }
}

const resultsDir = new URL("../results/", import.meta.url)
const readme = new URL("../README.md", import.meta.url)
export const readmeStart = "<!-- suite-results:start (generated by `npm run bench`; edits here are overwritten) -->"
export const readmeEnd = "<!-- suite-results:end -->"

/** Writes the JSON, latest.json, the Markdown report, the charts and (full runs of every phase) the README section. */
const write = (r: SuiteResult, opts: Options) =>
  Effect.promise(async () => {
    await fs.mkdir(resultsDir, { recursive: true })
    const name = `${r.date.slice(0, 10)}${r.quick ? "-quick" : ""}`
    const json = `${JSON.stringify(r, null, 2)}\n`
    await fs.writeFile(new URL(`${name}.json`, resultsDir), json)
    await fs.writeFile(new URL("latest.json", resultsDir), json)
    const svgs = charts(r)
    for (const [chart, svg] of Object.entries(svgs)) {
      await fs.writeFile(new URL(`${name}-${chart}.svg`, resultsDir), svg)
    }
    await fs.writeFile(
      new URL(`${name}.md`, resultsDir),
      `# Tidings benchmark suite: ${name}\n\n${markdown(r, (chart) => `${name}-${chart}.svg`)}`
    )
    const written = [
      `benchmarks/results/${name}.json`,
      "benchmarks/results/latest.json",
      `benchmarks/results/${name}.md`,
      `${Object.keys(svgs).length} charts`
    ]
    if (!r.quick && opts.phases.length === phases.length) {
      const page = await fs.readFile(readme, "utf8")
      await fs.writeFile(
        readme,
        replaceBetween(page, readmeStart, readmeEnd, markdown(r, (chart) => `results/${name}-${chart}.svg`))
      )
      written.push("benchmarks/README.md")
    }
    log(`wrote ${written.join(", ")}`)
  })

/** Runs the suite against a fresh durable server (and a RabbitMQ broker when one is available). */
export const run = (opts: Options): Effect.Effect<SuiteResult, never, Scope.Scope> =>
  Effect.gen(function*() {
    const date = new Date().toISOString()
    const started = performance.now()
    const loadStart = loadAverage()
    const host = machine()
    log(
      `suite${opts.quick ? " (--quick)" : ""}: ${
        opts.phases.join(", ")
      }; every figure the median of ${opts.runs} runs; ${host.cpus} cores, ${host.memoryGiB} GiB, load average ${
        loadStart.join(" / ")
      }`
    )
    const wantRabbit =
      (opts.phases.includes("latency") || opts.phases.includes("consumer") || opts.phases.includes("e2e")) &&
      opts.rabbit === "auto" && opts.latency.rabbitRates.length > 0
    const rabbitAvailable = wantRabbit && (Boolean(process.env["TIDINGS_AMQP_URL"]) || (yield* Effect.promise(() =>
      fs.access("/usr/sbin/rabbitmq-server").then(() => true, () => false)
    )))
    let rabbitNote: string | undefined = opts.rabbit === "off"
      ? "skipped (--rabbit off)"
      : wantRabbit && !rabbitAvailable
      ? "skipped: no broker (set TIDINGS_AMQP_URL, or install rabbitmq-server)"
      : undefined
    const [server, broker] = yield* Effect.all([
      Pg.server,
      rabbitAvailable
        ? Effect.exit(Rabbit.broker).pipe(Effect.map((e) => {
          if (Exit.isSuccess(e)) return e.value
          rabbitNote = `skipped: the broker did not start (${Cause.pretty(e.cause).split("\n")[0]})`
          return undefined
        }))
        : Effect.succeed(undefined)
    ], { concurrency: 2 })
    const url = () => server.url
    const problems: Array<string> = []
    const base = Latency.options(new Reader(parse([])))
    const claim = opts.phases.includes("claim") ? claimPhase(url, opts, problems) : undefined
    const latency = opts.phases.includes("latency")
      ? latencyPhase(url, () => broker?.url, base, opts, problems)
      : undefined
    const bloat = opts.phases.includes("bloat") ? bloatPhase(url, base, opts, problems) : undefined
    const scale = opts.phases.includes("scale") ? scalePhase(url, opts, problems) : undefined
    const rabbitUrl = () => broker?.url
    const logLatency = opts.phases.includes("latency")
      ? LogSuite.latencySteps(url, rabbitUrl, base, opts.log, opts.runs, problems)
      : undefined
    const logScale = opts.phases.includes("scale") ? LogSuite.scaleSteps(url, opts.log, opts.runs, problems) : undefined
    const consumer = opts.phases.includes("consumer")
      ? LogSuite.consumerSteps(url, rabbitUrl, opts.log, opts.runs, problems)
      : undefined
    const e2e = opts.phases.includes("e2e")
      ? LogSuite.e2eSteps(url, rabbitUrl, opts.log, opts.runs, problems)
      : undefined
    const steps = [
      ...(claim?.steps ?? []),
      ...(latency?.steps ?? []),
      ...(logLatency?.steps ?? []),
      ...(bloat?.steps ?? []),
      ...(scale?.steps ?? []),
      ...(logScale?.steps ?? []),
      ...(consumer?.steps ?? []),
      ...(e2e?.steps ?? [])
    ]
      .filter((s) => broker !== undefined || !s.label.includes("RabbitMQ"))
    yield* runSteps(steps, problems)
    const partial = {
      version: 1 as const,
      date,
      quick: opts.quick,
      runs: opts.runs,
      command: opts.command,
      durationSeconds: round((performance.now() - started) / 1000, 1),
      machine: {
        ...host,
        postgres: server.version,
        fsync: server.fsync,
        synchronousCommit: server.synchronousCommit,
        ...(broker === undefined ? {} : { rabbitmq: broker.version }),
        loadAverage: { start: loadStart, end: loadAverage() }
      },
      ...(claim === undefined ? {} : { claim: claim.result() }),
      ...(latency === undefined ? {} : { latency: latency.result(rabbitNote) }),
      ...(bloat === undefined ? {} : { bloat: bloat.result() }),
      ...(scale === undefined ? {} : { scaleOut: scale.result() }),
      ...(() => {
        const section = LogSuite.section({
          ...(logLatency === undefined ? {} : { latency: logLatency.result() }),
          ...(logScale === undefined ? {} : { scale: logScale.result() }),
          ...(consumer?.result() === undefined ? {} : { consumer: consumer.result()! }),
          ...(e2e?.result() === undefined ? {} : { e2e: e2e.result()! })
        })
        return section === undefined ? {} : { log: section }
      })(),
      problems
    }
    const result: SuiteResult = { ...partial, targets: targets(partial) }
    if (problems.length > 0) process.exitCode = 1
    log("")
    for (const t of result.targets) {
      log(`${t.met === null ? "  -  " : t.met ? "  ok " : "  NO "} ${t.description}: ${t.actual} (goal ${t.goal})`)
    }
    if (result.claim !== undefined) {
      log(`claim.best: ${Object.entries(result.claim.best).map(([k, v]) => `${k} ${int(v)}`).join(", ")}`)
    }
    log(
      `suite done in ${(result.durationSeconds / 60).toFixed(1)} min; load average ${loadStart[0]} at start, ${
        result.machine.loadAverage.end[0]
      } at end (${host.cpus} cores)`
    )
    if (opts.write) yield* write(result, opts)
    return result
  })
