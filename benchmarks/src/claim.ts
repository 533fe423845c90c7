/**
 * `npm run bench -- claim`: how many outbox events per second get claimed and marked published.
 *
 * Every run gets a fresh schema holding the same pending rows, then drains it:
 * - `ceiling`: the database's own limit, one statement claiming every row and one marking them all;
 * - `unordered`: the Tidings relay with `relays` pollers, claiming, publishing to the in-memory
 *   broker and settling: `Relay.processBatch` loops, or with `--driver layer` `Relay.layer` itself;
 * - `sql-loop`: a hand-written claim-then-mark loop on postgres.js, the floor a framework should
 *   stay close to;
 * - `table: "dirty"`: the relay on a table that also holds 10× as many published rows;
 * - `unordered-sync` (only when asked for): `unordered` with the store's `bookkeepingCommit: "sync"`,
 *   claims and settles waiting for the WAL flush like every other statement (the job queues compared
 *   in the suite commit that way);
 * - `unordered-no-coalesce` (only when asked for): `unordered` with `coalesceClaims: false`, one
 *   claim statement per poller and batch.
 * @module
 */
import type { Message } from "@tidings/core/Message"
import { OutboxStore } from "@tidings/core/OutboxStore"
import type * as OutboxStorePort from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import type * as PublisherPort from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as Wakeup from "@tidings/core/Wakeup"
import * as PgClient from "@tidings/postgres/PgClient"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { Effect, Layer, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import type { Reader } from "./lib/cli.ts"
import * as Pg from "./lib/postgres.ts"
import { counting, memoryPublisher, Tally } from "./lib/publishers.ts"
import { int, log, secs, table } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { round } from "./lib/stats.ts"
import * as LogMode from "./logMode.ts"

/** What one drain of the table gets to work with. */
interface Drain {
  readonly schema: string
  readonly store: OutboxStorePort.Service
  /** The broker's publisher, counting into `tally`. */
  readonly publisher: PublisherPort.Service
  readonly tally: Tally
  readonly relays: number
  readonly batch: number
  /** Pending events in the table. */
  readonly events: number
  /** `performance.now()` after which no new batch is started (the time cap). */
  readonly deadline: number
}

/** Drains the table (or stops at the deadline); returns the events claimed and marked. */
type Driver = (drain: Drain) => Effect.Effect<number, never, PgClient.PgClient>

const relayIds = (relays: number) => Array.from({ length: relays }, (_, i) => `bench-${i}`)

/** How the Tidings orderings run the relay (`--driver`). */
export type RelayDriver = "process-batch" | "layer"

/**
 * The Tidings relay, `relays` concurrent pollers. `config` is where a relay mode (such as per-key
 * ordering) goes.
 * - `process-batch`: each poller loops `Relay.processBatch` (claim, publish, settle: two commits
 *   per batch) until a claim comes back empty;
 * - `layer`: the pollers of `Relay.layer`, which settle a batch in the statement that claims the
 *   next (one commit per batch); the run ends when every event is published and the layer has
 *   shut down (its last settle included).
 */
const relayDriver = (config: Omit<Relay.Config, "batchSize" | "concurrency">) => (driver: RelayDriver): Driver => (d) =>
  driver === "layer" ? viaLayer(config, d) : Effect.gen(function*() {
    const settings = yield* Relay.settings({ ...config, batchSize: d.batch }).pipe(Effect.orDie)
    let events = 0
    yield* Effect.forEach(relayIds(d.relays), (relayId) =>
      Effect.gen(function*() {
        while (performance.now() < d.deadline) {
          const n = yield* Relay.processBatch(settings, relayId)
          // SKIP LOCKED: empty means every remaining row is claimed by a poller that will settle it.
          if (n === 0) return
          events += n
        }
      }), { concurrency: "unbounded", discard: true }).pipe(
        Effect.provideService(OutboxStore, d.store),
        Effect.provideService(Publisher, d.publisher),
        Effect.orDie
      )
    return events
  })

const viaLayer = (config: Omit<Relay.Config, "batchSize" | "concurrency">, d: Drain) =>
  Effect.scoped(Effect.gen(function*() {
    yield* Layer.build(
      Relay.layer({
        ...config,
        name: "bench",
        concurrency: d.relays,
        batchSize: d.batch,
        statsInterval: false,
        retention: false
      }).pipe(
        Layer.provide(Layer.mergeAll(
          Layer.succeed(OutboxStore)(d.store),
          Layer.succeed(Publisher)(d.publisher),
          Layer.succeed(Wakeup.Wakeups)(Wakeup.makeHub())
        ))
      )
    ).pipe(Effect.orDie)
    while (d.tally.total < d.events && performance.now() < d.deadline) yield* Effect.sleep("1 millis")
    return d.tally.total
  }))

/**
 * What any relay must read of a claimed row to publish it (the columns the Tidings store returns):
 * the baselines read the same, so that all three do the same work.
 */
const relayColumns =
  `id, seq, tx_id::text AS tx_id, event_type, event_version, aggregate_type, aggregate_id, ordering_key,
  payload::text AS payload, headers::text AS headers, occurred_at, created_at, attempts`

/**
 * The hand-written baseline on postgres.js: per iteration one claiming UPDATE (same predicate, order
 * and lease columns as the store, reading the same columns) and one UPDATE marking the returned ids
 * published. Nothing is published: this is the floor of what a relay costs the database.
 */
const sqlLoop: Driver = (d) =>
  Effect.gen(function*() {
    const { sql } = yield* PgClient.PgClient
    const outbox = sql(`${d.schema}.outbox`)
    let events = 0
    const loop = async (relayId: string) => {
      while (performance.now() < d.deadline) {
        const claimed = await sql<Array<{ id: string }>>`UPDATE ${outbox}
          SET status = 'processing', attempts = attempts + 1, claimed_by = ${relayId}, claimed_until = now() + interval '30 seconds'
          WHERE id IN (
            SELECT id FROM ${outbox} WHERE status = 'pending' AND available_at <= now()
            ORDER BY available_at, seq LIMIT ${d.batch} FOR UPDATE SKIP LOCKED
          )
          RETURNING ${sql.unsafe(relayColumns)}`
        if (claimed.length === 0) return
        const ids = claimed.map((r) => r.id)
        await sql`UPDATE ${outbox} SET status = 'published', published_at = now(), claimed_by = NULL, claimed_until = NULL
          WHERE id = ANY(${ids}::uuid[])`
        d.tally.add(ids)
        events += ids.length
      }
    }
    yield* Effect.promise(() => Promise.all(relayIds(d.relays).map(loop)))
    return events
  })

/**
 * The orderings measured, in run order. A new relay mode is one line here, e.g.
 * `"per-key": relayDriver({ ordering: "per-key" })`.
 */
const drivers = {
  unordered: relayDriver({}),
  "per-key": relayDriver({ ordering: "per-key" }),
  "sql-loop": () => sqlLoop,
  "unordered-sync": relayDriver({}),
  "unordered-no-coalesce": relayDriver({ coalesceClaims: false }),
  // Log mode drains a log, not the outbox table: `measure` hands it to `LogMode.measure`.
  log: () => () => Effect.die(new Error("log mode runs through LogMode.measure"))
} satisfies Record<string, (driver: RelayDriver) => Driver>

/** A measured way of draining the outbox. */
export type Ordering = keyof typeof drivers
/** Orderings driven by the Tidings relay (the dirty-table runs use these). */
const relayOrderings: ReadonlyArray<Ordering> = ["unordered"]
const orderings = Object.keys(drivers) as ReadonlyArray<Ordering>
/** What runs without `--ordering` (`unordered-sync` and `unordered-no-coalesce` only on request). */
const defaultOrderings: ReadonlyArray<Ordering> = ["unordered", "per-key", "sql-loop"]

/** The store's options for an ordering: `unordered-sync` waits for the WAL flush on claims and settles. */
const storeOptions = (ordering: Ordering): PgOutboxStore.Options =>
  ordering === "unordered-sync" ? { bookkeepingCommit: "sync" } : {}
const tables = ["clean", "dirty"] as const
/** `dirty`: the table also holds 10× as many published rows as pending ones. */
export type Table = (typeof tables)[number]

/** One measured drain, as printed in the JSON output. */
export interface Run {
  readonly ordering: Ordering
  readonly table: Table
  readonly relays: number
  readonly batch: number
  readonly eventsPerSecond: number
  readonly duplicates: number
  /** Events claimed and marked in the run. */
  readonly events: number
  readonly seconds: number
  /** True when the run hit the time cap before the table was drained. */
  readonly capped: boolean
  /** Only when the table check failed: events missing from (or extra in) the published rows. */
  readonly lost?: number
}

/** The JSON output of `bench claim`. */
export interface Result {
  /** The best of three attempts (`samples`: each attempt's events per second). */
  readonly ceiling: {
    readonly eventsPerSecond: number
    readonly events: number
    readonly seconds: number
    readonly samples: ReadonlyArray<number>
  }
  readonly runs: ReadonlyArray<Run>
  readonly meta: Record<string, unknown>
}

/** Settings of `bench claim`. */
export interface Options {
  readonly quick: boolean
  /** Pending rows per run. */
  readonly events: number
  /** A run stops starting batches after this many seconds (slow batch-1 runs). */
  readonly capSeconds: number
  readonly driver: RelayDriver
  readonly plan: ReadonlyArray<Plan>
}

/** One drain's settings. */
export interface Plan {
  readonly ordering: Ordering
  readonly table: Table
  readonly relays: number
  readonly batch: number
}

/** Reads the `claim` flags: `--quick`, `--relays`, `--batch`, `--ordering`, `--table`, `--events`, `--cap`, `--driver`. */
export const options = (args: Reader): Options => {
  const quick = args.bool("quick")
  const relays = args.integers("relays")
  const batch = args.integers("batch")
  const only = args.choices("ordering", orderings) ?? defaultOrderings
  const onlyTables = args.choices("table", tables) ?? tables
  const events = args.number("events") ?? (quick ? 10_000 : 50_000)
  const capSeconds = args.number("cap") ?? (quick ? 2 : 15)
  const driver = args.choices("driver", ["process-batch", "layer"] as const)?.[0] ?? "layer"
  const plan: Array<Plan> = []
  if (onlyTables.includes("clean")) {
    for (const r of relays ?? [1, 4, 8, 16]) {
      for (const b of batch ?? [1, 10, 100, 500]) {
        // Interleaved, so that drift over the run (disk, checkpoints) hits every ordering alike.
        for (const ordering of only) plan.push({ ordering, table: "clean", relays: r, batch: b })
      }
    }
  }
  // The dirty table is slow to seed (10× the rows): a small subset unless asked otherwise.
  if (onlyTables.includes("dirty")) {
    for (const r of relays ?? [4]) {
      for (const b of batch ?? [100, 500]) {
        for (const ordering of only.filter((o) => relayOrderings.includes(o))) {
          plan.push({ ordering, table: "dirty", relays: r, batch: b })
        }
      }
    }
  }
  return { quick, events: Math.round(events), capSeconds, driver, plan }
}

/**
 * A fresh schema with `msgs` pending (for `dirty`, after 10× as many published rows), analyzed. The
 * checkpoint comes right before the pending rows (see `Pg.checkpoint`).
 */
export const prepare = (table: Table, msgs: ReadonlyArray<Message>, ordering: Ordering = "unordered") =>
  Effect.gen(function*() {
    const schema = yield* Pg.freshSchema("claim")
    const store = yield* PgOutboxStore.make({ schema, ...storeOptions(ordering) }).pipe(Effect.orDie)
    if (table === "dirty") {
      const started = performance.now()
      yield* Seed.insertHistory(store, schema, msgs.length * 10)
      log(
        `         (history: ${int(msgs.length * 10)} published rows in ${secs((performance.now() - started) / 1000)} s)`
      )
    }
    yield* Pg.checkpoint
    yield* Seed.insertPending(store, msgs)
    yield* Pg.analyze(schema)
    return { schema, store }
  })

/** Rows per status, to check that a run did what it claims. */
export const counts = (schema: string) =>
  SqlClient.SqlClient.use((sql) =>
    sql<{ status: string; n: number }>`SELECT status, count(*)::int AS n FROM ${
      sql(`${schema}.outbox`)
    } GROUP BY status`
  ).pipe(Effect.map((rows) => new Map(rows.map((r) => [r.status, Number(r.n)]))), Effect.orDie)

/** One drain with its own pool (relays + 2 connections) and schema. */
export const measure = (
  url: string,
  plan: Plan,
  msgs: ReadonlyArray<Message>,
  capSeconds: number,
  driver: RelayDriver
): Effect.Effect<Run> =>
  plan.ordering === "log" ?
    Effect.map(
      LogMode.measure(url, plan, msgs, capSeconds),
      (r) => ({ ...r, ordering: plan.ordering, table: plan.table, relays: plan.relays, batch: plan.batch })
    ) :
    Effect.scoped(Effect.gen(function*() {
      const context = yield* Pg.openPool(url, plan.relays + 2)
      return yield* Effect.gen(function*() {
        const { schema, store } = yield* prepare(plan.table, msgs, plan.ordering)
        return yield* drain(
          schema,
          store,
          plan,
          msgs.length,
          plan.table === "dirty" ? msgs.length * 10 : 0,
          capSeconds,
          driver
        )
      }).pipe(Effect.provideContext(context))
    }))

/**
 * Drains `events` pending rows of `schema` (which already holds `history` published rows) with
 * `plan`'s ordering, relays and batch, in the current pool; checks the table afterwards.
 */
export const drain = (
  schema: string,
  store: OutboxStorePort.Service,
  plan: Plan,
  events: number,
  history: number,
  capSeconds: number,
  driver: RelayDriver
): Effect.Effect<Run, never, SqlClient.SqlClient | PgClient.PgClient | Scope.Scope> =>
  Effect.gen(function*() {
    const tally = new Tally()
    const publisher = counting(yield* memoryPublisher, tally)
    const start = performance.now()
    const done = yield* drivers[plan.ordering](driver)({
      schema,
      store,
      publisher,
      tally,
      relays: plan.relays,
      batch: plan.batch,
      events,
      deadline: start + capSeconds * 1000
    })
    const seconds = (performance.now() - start) / 1000
    const byStatus = yield* counts(schema)
    const published = byStatus.get("published") ?? 0
    const expected = done + history
    const capped = done < events
    // A capped run may settle a few more events while its pollers stop than it counted.
    const unsettled = (byStatus.get("pending") ?? 0) + (byStatus.get("processing") ?? 0)
    const ok = capped ? published >= expected : published === expected && unsettled === 0
    if (!ok) {
      log(
        `  ! ${plan.ordering}: ${int(done)} events reported but the table has ${
          JSON.stringify(Object.fromEntries(byStatus))
        }`
      )
      process.exitCode = 1
    }
    return {
      ordering: plan.ordering,
      table: plan.table,
      relays: plan.relays,
      batch: plan.batch,
      eventsPerSecond: Math.round(done / seconds),
      duplicates: tally.duplicates,
      events: done,
      seconds: round(seconds, 3),
      capped,
      ...(ok ? {} : { lost: capped ? expected - published : Math.abs(expected - published) + unsettled })
    } satisfies Run
  })

/**
 * The database's ceiling on the same table: one statement claims every pending row (returning what
 * a relay must read to publish it, as the store and the SQL loop do) and one marks them all
 * published; no round trips per batch.
 */
export const ceiling = (url: string, msgs: ReadonlyArray<Message>) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, 2)
    return yield* Effect.gen(function*() {
      const { schema } = yield* prepare("clean", msgs)
      const { sql } = yield* PgClient.PgClient
      const outbox = sql(`${schema}.outbox`)
      const start = performance.now()
      const claimed = yield* Effect.promise(() =>
        sql<Array<{ id: string }>>`UPDATE ${outbox}
          SET status = 'processing', attempts = attempts + 1, claimed_by = 'ceiling', claimed_until = now() + interval '30 seconds'
          WHERE status = 'pending' AND available_at <= now()
          RETURNING ${sql.unsafe(relayColumns)}`
      )
      yield* Effect.promise(() =>
        sql`UPDATE ${outbox} SET status = 'published', published_at = now(), claimed_by = NULL, claimed_until = NULL
          WHERE status = 'processing' AND claimed_by = 'ceiling'`
      )
      const seconds = (performance.now() - start) / 1000
      return {
        eventsPerSecond: Math.round(claimed.length / seconds),
        events: claimed.length,
        seconds: round(seconds, 3)
      }
    }).pipe(Effect.provideContext(context))
  }))

const describe = (p: Plan) =>
  `${p.ordering.padEnd(14)} ${p.table.padEnd(5)} relays=${String(p.relays).padStart(2)} batch=${
    String(p.batch).padStart(3)
  }`

/** Runs the claim benchmark against a fresh durable server. */
export const run = (opts: Options): Effect.Effect<Result, never, Scope.Scope> =>
  Effect.gen(function*() {
    const server = yield* Pg.server
    log(
      `claim: ${
        int(opts.events)
      } pending events per run, ${opts.plan.length} runs + ceiling, cap ${opts.capSeconds} s per run, relay driver ${opts.driver}`
    )
    const msgs = yield* Seed.messages(opts.events)

    // Warm-up (not reported): JIT, the server's caches and catalog lookups.
    const warm = msgs.slice(0, Math.min(5_000, msgs.length))
    for (const ordering of new Set(opts.plan.map((p) => p.ordering))) {
      yield* measure(
        server.url,
        { ordering, table: "clean", relays: 4, batch: 100 },
        warm,
        opts.capSeconds,
        opts.driver
      )
    }

    // Best of three: a ceiling is what the database can do, and one attempt is at the mercy of
    // whatever else the machine is doing at that moment.
    const attempts: Array<{ readonly eventsPerSecond: number; readonly events: number; readonly seconds: number }> = []
    for (let i = 0; i < 3; i++) attempts.push(yield* ceiling(server.url, msgs))
    const best = attempts.reduce((a, b) => (b.eventsPerSecond > a.eventsPerSecond ? b : a))
    const ceil = { ...best, samples: attempts.map((a) => a.eventsPerSecond) }
    log(
      `  ceiling                              ${int(ceil.eventsPerSecond).padStart(7)} events/s (best of ${
        ceil.samples.map(int).join(", ")
      })`
    )
    const runs: Array<Run> = []
    const started = performance.now()
    for (const [i, plan] of opts.plan.entries()) {
      const r = yield* measure(server.url, plan, msgs, opts.capSeconds, opts.driver)
      runs.push(r)
      log(
        `  [${String(i + 1).padStart(2)}/${opts.plan.length}] ${describe(plan)} ${
          int(r.eventsPerSecond).padStart(7)
        } events/s${r.capped ? ` (capped: ${int(r.events)} in ${secs(r.seconds)} s)` : ""}${
          r.duplicates > 0 ? `  ${r.duplicates} duplicates` : ""
        }`
      )
    }

    log("")
    log(
      `claim + mark published, ${
        int(opts.events)
      } pending events per run, relay driver ${opts.driver} (PostgreSQL ${server.version}, fsync=${server.fsync}); ceiling ${
        int(ceil.eventsPerSecond)
      } events/s`
    )
    table(
      ["ordering", "table", "relays", "batch", "events/s", "% ceiling", "events", "seconds", "dup"],
      runs.map((r) => [
        r.ordering,
        r.table,
        String(r.relays),
        String(r.batch),
        int(r.eventsPerSecond),
        `${Math.round((100 * r.eventsPerSecond) / ceil.eventsPerSecond)}%`,
        `${int(r.events)}${r.capped ? "*" : ""}`,
        secs(r.seconds),
        String(r.duplicates)
      ])
    )
    if (runs.some((r) => r.capped)) log(`* capped at ${opts.capSeconds} s: the rate is over the events done`)
    log(`total ${secs((performance.now() - started) / 1000)} s`)
    return {
      ceiling: ceil,
      runs,
      meta: {
        events: opts.events,
        capSeconds: opts.capSeconds,
        driver: opts.driver,
        quick: opts.quick,
        postgres: server.version,
        fsync: server.fsync,
        synchronousCommit: server.synchronousCommit,
        node: process.version
      }
    }
  })
