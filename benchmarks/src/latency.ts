/**
 * `pnpm bench latency`: how long an event waits between its producer's COMMIT and the broker's
 * receipt, under a paced load, with two ways for relays to learn about new events:
 * - `notify`: the store sends `pg_notify` for appends (`notify: true`, coalesced after commit, or
 *   `--notify in-transaction`) and `PgWakeup` LISTENs and turns notifications into wake-ups; relays
 *   in this process are also woken by the in-process hub right after the commit (`Outbox.append`
 *   does that by itself);
 * - `poll`: no wake-ups at all (the relays get a private hub nobody signals): adaptive polling only;
 * - `local` (only when asked for): the in-process hub only, no NOTIFY, as when producers and relays
 *   share a process and nothing else appends.
 *
 * It also measures what the NOTIFY costs producers: saturated single-event transactions per second
 * with `notify: true` (coalesced, after commit), `"in-transaction"` and `false`.
 * @module
 */
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import type * as OutboxStorePort from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as Wakeup from "@tidings/core/Wakeup"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as PgWakeup from "@tidings/postgres/PgWakeup"
import { Duration, Effect, Layer, type Scope } from "effect"
import { type Reader, UsageError } from "./lib/cli.ts"
import * as Pg from "./lib/postgres.ts"
import { memoryPublisher, timing } from "./lib/publishers.ts"
import { int, log, ms, secs, table } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { percentile, round, sorted } from "./lib/stats.ts"

const wakeups = ["notify", "poll", "local"] as const
const notifyStyles = ["coalesced", "in-transaction"] as const
/** How the store sends its NOTIFY in `notify` mode: `notify: true` or `notify: "in-transaction"`. */
export type NotifyStyle = (typeof notifyStyles)[number]
type StoreNotify = NonNullable<PgOutboxStore.Options["notify"]>
const storeNotify = (style: NotifyStyle): StoreNotify => (style === "coalesced" ? true : "in-transaction")
/** How relays learn about new events. */
export type WakeupMode = (typeof wakeups)[number]

/** Settings of `bench latency`. */
export interface Options {
  readonly quick: boolean
  readonly rates: ReadonlyArray<number>
  readonly wakeups: ReadonlyArray<WakeupMode>
  readonly notify: NotifyStyle
  /** Measured seconds per paced run (after the warm-up). */
  readonly duration: number
  /** Unmeasured seconds at the start of each paced run. */
  readonly warmup: number
  readonly relays: number
  /** Producer fibers sharing the paced load (each transaction holds a connection). */
  readonly producers: number
  /** Measured seconds per producer-throughput round; two rounds per mode in a full run. */
  readonly producerSeconds: number
  readonly producerRounds: number
}

/** Reads the `latency` flags: `--quick`, `--rates`, `--wakeup`, `--notify`, `--duration`, `--relays`, `--producers`. */
export const options = (args: Reader): Options => {
  const quick = args.bool("quick")
  const relays = args.integers("relays")
  if (relays !== undefined && relays.length !== 1) throw new UsageError("--relays takes one number for latency")
  const producers = args.integers("producers")
  return {
    quick,
    rates: args.integers("rates") ?? [200, 1_000],
    wakeups: args.choices("wakeup", wakeups) ?? ["notify", "poll"],
    notify: args.choices("notify", notifyStyles)?.[0] ?? "coalesced",
    duration: args.number("duration") ?? (quick ? 5 : 15),
    warmup: quick ? 1 : 2,
    relays: relays?.[0] ?? 4,
    producers: producers?.[0] ?? 16,
    producerSeconds: quick ? 2 : 4,
    producerRounds: quick ? 1 : 3
  }
}

/** One paced run, as printed in the JSON output. */
export interface Run {
  readonly transport: "memory"
  readonly wakeup: WakeupMode
  readonly rate: number
  readonly target: "publish"
  readonly p50Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  /** Events measured (after the warm-up). */
  readonly events: number
  /** Commits per second the producers achieved in the measured window. */
  readonly achievedRate: number
  /** Claim statements per second issued by all relays, and the share that came back empty. */
  readonly claimsPerSecond: number
  readonly emptyClaims: number
}

/** The JSON output of `bench latency`. */
export interface Result {
  readonly runs: ReadonlyArray<Run>
  /**
   * Saturated producers, one event per transaction: transactions per second with `notify: true`,
   * with `notify: false`, and with `notify: "in-transaction"`.
   */
  readonly producer: { readonly withWakeup: number; readonly withoutWakeup: number; readonly withWakeupInTransaction: number }
  readonly meta: Record<string, unknown>
}

/**
 * Pairs each event's commit time with its receipt time. A delivery can (rarely) be seen before the
 * producer fiber records its commit: the relay was woken by the commit and ran first. Such events
 * count as zero latency.
 */
class LatencyTracker {
  readonly #commits = new Map<string, { readonly at: number; readonly measured: boolean }>()
  readonly #early = new Map<string, number>()
  readonly #delivered = new Set<string>()
  readonly latencies: Array<number> = []
  duplicates = 0

  committed(id: string, at: number, measured: boolean): void {
    const received = this.#early.get(id)
    if (received === undefined) {
      this.#commits.set(id, { at, measured })
      return
    }
    this.#early.delete(id)
    if (measured) this.latencies.push(Math.max(0, received - at))
  }

  received(id: string, at: number): void {
    if (this.#delivered.has(id)) {
      this.duplicates++
      return
    }
    this.#delivered.add(id)
    const commit = this.#commits.get(id)
    if (commit === undefined) {
      this.#early.set(id, at)
      return
    }
    this.#commits.delete(id)
    if (commit.measured) this.latencies.push(at - commit.at)
  }

  /** Committed events not delivered yet. */
  get outstanding(): number {
    return this.#commits.size
  }
}

/**
 * Counts the relays' claim statements (plain claims and settle-and-claim), and the empty ones: a
 * poll or wake-up that found nothing.
 */
const countingClaims = (store: OutboxStorePort.Service) => {
  const counts = { claims: 0, empty: 0 }
  const count = (rows: ReadonlyArray<unknown>) =>
    Effect.sync(() => {
      counts.claims++
      if (rows.length === 0) counts.empty++
    })
  const wrapped: OutboxStorePort.Service = {
    ...store,
    claim: (o) => Effect.tap(store.claim(o), count),
    settleAndClaim: (relayId, settlement, next) => Effect.tap(store.settleAndClaim(relayId, settlement, next), count)
  }
  return { store: wrapped, counts }
}

/** LISTENs on the schema's channel (its own connection) and signals `hub`, as a relay process does. */
const listen = (schema: string, hub: Wakeup.Service) =>
  Layer.build(PgWakeup.layer({ schema }).pipe(Layer.provide(Layer.succeed(Wakeup.Wakeups)(hub))))

const sleepUntil = (at: number) => {
  const wait = at - performance.now()
  return wait > 0 ? Effect.sleep(Duration.millis(wait)) : Effect.void
}

/** Waits until `done()` or `timeoutMs`; returns whether it got done. */
const waitFor = (done: () => boolean, timeoutMs: number) =>
  Effect.gen(function*() {
    const until = performance.now() + timeoutMs
    while (!done() && performance.now() < until) yield* Effect.sleep("5 millis")
    return done()
  })

/** One paced run: producers at `rate` events/s, one event per transaction, `relays` relays publishing. */
const paced = (url: string, wakeup: WakeupMode, rate: number, opts: Options): Effect.Effect<{ readonly run: Run; readonly lagMs: number }> =>
  Effect.scoped(Effect.gen(function*() {
    // Producers + relays each hold a connection at times; +2 for stats/reclaim and slack.
    const context = yield* Pg.openPool(url, opts.producers + opts.relays + 2)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("latency")
      const store = yield* PgOutboxStore.make({ schema, notify: wakeup === "notify" ? storeNotify(opts.notify) : false }).pipe(Effect.orDie)
      const tracker = new LatencyTracker()
      const publisher = timing(yield* memoryPublisher, (id, at) => tracker.received(id, at))
      // `Outbox.append` signals the process hub after commit; in poll mode the relays get a private
      // hub instead, so they hear neither that nor anything else.
      const hub = wakeup === "poll" ? Wakeup.makeHub() : yield* Wakeup.Wakeups
      if (wakeup === "notify") yield* listen(schema, hub)
      const claims = countingClaims(store)
      yield* Layer.build(
        Relay.layer({ name: "bench", concurrency: opts.relays }).pipe(
          Layer.provide(Layer.mergeAll(
            Layer.succeed(OutboxStore)(claims.store),
            Layer.succeed(Publisher)(publisher),
            Layer.succeed(Wakeup.Wakeups)(hub)
          ))
        )
      ).pipe(Effect.orDie)

      // Absolute target times (event k at start + k/rate), so a late transaction does not slow the
      // rate down: the next ones are sent at once until the schedule is met again.
      const total = Math.round(rate * (opts.warmup + opts.duration))
      const start = performance.now() + 20
      const measuredFrom = start + opts.warmup * 1000
      let maxLagMs = 0
      let measuredCommits = 0
      let lastCommit = measuredFrom
      const producer = (first: number) =>
        Effect.gen(function*() {
          for (let k = first; k < total; k += opts.producers) {
            const target = start + (k * 1000) / rate
            yield* sleepUntil(target)
            maxLagMs = Math.max(maxLagMs, performance.now() - target)
            const message = yield* Outbox.transaction(Outbox.append(Seed.OrderPlaced, Seed.input(k)))
            const committedAt = performance.now()
            const measured = target >= measuredFrom
            tracker.committed(message.id, committedAt, measured)
            if (measured) {
              measuredCommits++
              lastCommit = Math.max(lastCommit, committedAt)
            }
          }
        })
      const claimsBefore = { ...claims.counts }
      yield* Effect.forEach(Array.from({ length: opts.producers }, (_, i) => i), producer, { concurrency: "unbounded", discard: true }).pipe(
        Effect.provideService(OutboxStore, store),
        Effect.orDie
      )
      const producedFor = (lastCommit - measuredFrom) / 1000
      // Poll mode may need up to the maximum poll interval (2 s) to see the last events.
      if (!(yield* waitFor(() => tracker.outstanding === 0, 10_000))) {
        log(`  ! ${tracker.outstanding} events were not published within 10 s`)
        process.exitCode = 1
      }
      if (tracker.duplicates > 0) log(`  (${tracker.duplicates} events were published twice)`)
      const window = (performance.now() - measuredFrom) / 1000
      const claimCount = claims.counts.claims - claimsBefore.claims
      const emptyCount = claims.counts.empty - claimsBefore.empty
      const s = sorted(tracker.latencies)
      const run: Run = {
        transport: "memory",
        wakeup,
        rate,
        target: "publish",
        p50Ms: round(percentile(s, 50)),
        p95Ms: round(percentile(s, 95)),
        p99Ms: round(percentile(s, 99)),
        maxMs: round(percentile(s, 100)),
        events: s.length,
        achievedRate: Math.round(measuredCommits / producedFor),
        claimsPerSecond: Math.round(claimCount / (window + opts.warmup)),
        emptyClaims: round(claimCount === 0 ? 0 : emptyCount / claimCount, 3)
      }
      return { run, lagMs: maxLagMs }
    }).pipe(Effect.provideContext(context))
  }))

/**
 * Saturated producers: `producers` fibers appending one event per transaction as fast as they can
 * for `seconds` (after a 0.5 s warm-up). A LISTEN session is open when notifying, as relays would
 * have one; it counts the notifications, to show how much the coalescing saves. Returns
 * [transactions, seconds, notifications].
 */
const saturated = (url: string, notify: StoreNotify, producers: number, seconds: number) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, producers + 2)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("producer")
      const store = yield* PgOutboxStore.make({ schema, notify }).pipe(Effect.orDie)
      const from = performance.now() + 500
      const until = from + seconds * 1000
      let notifications = 0
      const counter: Wakeup.Service = {
        ...Wakeup.makeHub(),
        signal: () => Effect.sync(() => void (performance.now() >= from && performance.now() < until && notifications++))
      }
      if (notify !== false) yield* listen(schema, counter)
      let commits = 0
      let k = 0
      yield* Effect.forEach(Array.from({ length: producers }), () =>
        Effect.gen(function*() {
          while (performance.now() < until) {
            yield* Outbox.transaction(Outbox.append(Seed.OrderPlaced, Seed.input(k++)))
            const now = performance.now()
            if (now >= from && now < until) commits++
          }
        }), { concurrency: "unbounded", discard: true }).pipe(Effect.provideService(OutboxStore, store), Effect.orDie)
      return [commits, seconds, notifications] as const
    }).pipe(Effect.provideContext(context))
  }))

/** Runs the latency benchmark against a fresh durable server. */
export const run = (opts: Options): Effect.Effect<Result, never, Scope.Scope> =>
  Effect.gen(function*() {
    const server = yield* Pg.server
    const started = performance.now()
    log(`latency: ${opts.relays} relays, ${opts.producers} producer fibers, ${opts.warmup} s warm-up + ${opts.duration} s per run`)
    const runs: Array<Run> = []
    for (const rate of opts.rates) {
      for (const wakeup of opts.wakeups) {
        const { lagMs, run: r } = yield* paced(server.url, wakeup, rate, opts)
        runs.push(r)
        log(`  ${wakeup.padEnd(6)} ${String(rate).padStart(5)}/s  p50 ${ms(r.p50Ms)} ms  p95 ${ms(r.p95Ms)} ms  p99 ${ms(r.p99Ms)} ms  (${int(r.events)} events, ${int(r.claimsPerSecond)} claims/s)${lagMs > 100 ? `  producers up to ${int(lagMs)} ms behind schedule` : ""}`)
      }
    }

    // Alternating rounds, so that drift (checkpoints, other load) hits every mode alike.
    const modes = [["withoutWakeup", false], ["withWakeup", true], ["withWakeupInTransaction", "in-transaction"]] as const
    const totals = { withoutWakeup: [0, 0], withWakeup: [0, 0], withWakeupInTransaction: [0, 0] }
    for (let round = 0; round < opts.producerRounds; round++) {
      for (const [key, notify] of modes) {
        const [commits, seconds, notifications] = yield* saturated(server.url, notify, 4, opts.producerSeconds)
        totals[key][0]! += commits
        totals[key][1]! += seconds
        log(`  producers (4, saturated) notify=${String(notify)}: ${int(commits / seconds)} tx/s${notify === false ? "" : `, ${int(notifications / seconds)} notifications/s`}`)
      }
    }
    const tps = (key: keyof typeof totals) => Math.round(totals[key][0]! / totals[key][1]!)
    const producer = { withWakeup: tps("withWakeup"), withoutWakeup: tps("withoutWakeup"), withWakeupInTransaction: tps("withWakeupInTransaction") }

    log("")
    log(`append-commit → publish latency (memory broker, ${opts.relays} relays, notify ${opts.notify}; PostgreSQL ${server.version}, fsync=${server.fsync})`)
    table(
      ["wakeup", "rate/s", "achieved/s", "events", "p50 ms", "p95 ms", "p99 ms", "max ms", "claims/s", "empty"],
      runs.map((r) => [
        r.wakeup,
        int(r.rate),
        int(r.achievedRate),
        int(r.events),
        ms(r.p50Ms),
        ms(r.p95Ms),
        ms(r.p99Ms),
        ms(r.maxMs),
        int(r.claimsPerSecond),
        `${Math.round(r.emptyClaims * 100)}%`
      ])
    )
    log("")
    const vs = (n: number) => {
      const change = 100 * (n / producer.withoutWakeup - 1)
      return `${change >= 0 ? "+" : "-"}${Math.abs(change).toFixed(0)}%`
    }
    log(`producers (4 fibers, one event per transaction, saturated, ${opts.producerRounds} × ${opts.producerSeconds} s each):`)
    table(["notify", "tx/s", "vs none"], [
      ["false (no wake-up)", int(producer.withoutWakeup), ""],
      ["true (coalesced, after commit)", int(producer.withWakeup), vs(producer.withWakeup)],
      ["\"in-transaction\"", int(producer.withWakeupInTransaction), vs(producer.withWakeupInTransaction)]
    ])
    log(`total ${secs((performance.now() - started) / 1000)} s`)
    return {
      runs,
      producer,
      meta: {
        relays: opts.relays,
        producers: opts.producers,
        durationSeconds: opts.duration,
        warmupSeconds: opts.warmup,
        notify: opts.notify,
        quick: opts.quick,
        postgres: server.version,
        fsync: server.fsync,
        synchronousCommit: server.synchronousCommit,
        node: process.version
      }
    }
  })
