/**
 * `npm run bench -- publish`: sustained outbox → RabbitMQ throughput, beside raw amqplib.
 *
 * - `tidings`: pending events pre-inserted in a fresh outbox (as the claim benchmark does), then
 *   `Relay.layer` with `relays` pollers and `AmqpPublisher` (`channels` confirm channels) drains them
 *   into a classic queue: claim, publish with confirms, mark published;
 * - `raw`: the same messages (the same bytes: `AmqpPublisher.toOutgoing`) published by plain
 *   amqplib on as many confirm channels with as many confirms in flight (`relays × batch`), as a
 *   sliding window and as `relays` loops of publish-a-batch-then-await-its-confirms; the better of
 *   the two is the ceiling the relay is compared with;
 * - `saturated`: producers append continuously (several events per transaction) faster than the
 *   relays can drain while the relays run, and every event's commit → confirm time is recorded;
 * - `loaded`: the same, paced at 80% of what the relays confirmed while saturated.
 *
 * Every run checks that the queue holds each event exactly once (its ids are read back) and that
 * the outbox has every event published.
 * @module
 */
import type { Message } from "@tidings/core/Message"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import type * as OutboxStorePort from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import type * as PublisherPort from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as Wakeup from "@tidings/core/Wakeup"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import type { ConfirmChannel } from "amqplib"
import { Duration, Effect, Layer, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as os from "node:os"
import { LatencyTracker, waitFor } from "./latency.ts"
import { type Reader, UsageError } from "./lib/cli.ts"
import * as Pg from "./lib/postgres.ts"
import { counting, Tally, timing } from "./lib/publishers.ts"
import * as Rabbit from "./lib/rabbit.ts"
import { int, log, ms, secs, table } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { percentile, round, sorted } from "./lib/stats.ts"
import * as PublishWebhooks from "./publishWebhooks.ts"

/** Relay settings of one throughput comparison. */
export interface Setting {
  readonly relays: number
  readonly batch: number
  /** Confirm channels of the `AmqpPublisher` (and of the raw publisher). */
  readonly channels: number
}

/** Settings of `bench publish`. */
export interface Options {
  readonly quick: boolean
  /** Pending events per throughput run. */
  readonly events: number
  /** Every combination of relays × batch × channels is compared with raw amqplib. */
  readonly settings: ReadonlyArray<Setting>
  /** Alternating tidings / raw rounds per setting (the best of each is reported). */
  readonly rounds: number
  /** Whether to compare throughput (else the runs under load use the first setting). */
  readonly throughput: boolean
  readonly saturated: boolean
  readonly loaded: boolean
  /** Events/s of the loaded run (default: 80% of what the relays confirmed while saturated). */
  readonly loadedRate: number | undefined
  /** Measured seconds of the saturated and loaded runs. */
  readonly loadSeconds: number
  /** Producer fibers and events per producer transaction in the runs under load. */
  readonly producers: number
  readonly txEvents: number
  /** Eager dispatch's limit and producer flow control in the runs under load. */
  readonly flow: Flow
}

/**
 * Defaults tuned on a 2-core machine (see the README): the best of relays {2,4,6,8,16} × batch
 * {100,250,500,1000,2000} × channels {1,2,4}. Gains level off from 4 relays × 1,000; one channel
 * beats more (each is one more broker process competing for the two cores).
 */
const tuned: Setting = { relays: 4, batch: 1_000, channels: 1 }

/**
 * Reads the `publish` flags: `--transport rabbitmq|webhooks` (webhooks: see `publishWebhooks.ts`),
 * `--quick`, `--phase`, `--events`, `--relays`, `--batch`, `--channels`, `--rounds`, `--seconds`,
 * `--loaded-rate`, `--producers`, `--tx-events`.
 */
export const options = (args: Reader): Options | PublishWebhooks.Options => {
  const transport = args.choices("transport", ["rabbitmq", "webhooks"] as const)
  if (transport !== undefined && transport.length !== 1) {
    throw new UsageError("--transport takes one of rabbitmq, webhooks")
  }
  if (transport?.[0] === "webhooks") return PublishWebhooks.options(args)
  const quick = args.bool("quick")
  const relays = args.integers("relays") ?? [tuned.relays]
  const batch = args.integers("batch") ?? [tuned.batch]
  const channels = args.integers("channels") ?? [tuned.channels]
  const settings: Array<Setting> = []
  for (const r of relays) {
    for (const b of batch) for (const c of channels) settings.push({ relays: r, batch: b, channels: c })
  }
  if (channels.some((c) => c > 64)) throw new UsageError("--channels: at most 64")
  const single = (name: string) => {
    const list = args.integers(name)
    if (list !== undefined && list.length !== 1) throw new UsageError(`--${name} takes one number`)
    return list?.[0]
  }
  const phases = args.choices("phase", ["throughput", "saturated", "loaded"] as const) ??
    ["throughput", "saturated", "loaded"]
  const seconds = args.number("seconds")
  return {
    quick,
    events: Math.round(args.number("events") ?? (quick ? 20_000 : 50_000)),
    settings,
    rounds: single("rounds") ?? (quick ? 1 : 2),
    throughput: phases.includes("throughput"),
    saturated: phases.includes("saturated"),
    loaded: phases.includes("loaded"),
    loadedRate: single("loaded-rate"),
    loadSeconds: seconds ?? (quick ? 4 : 10),
    producers: single("producers") ?? 16,
    txEvents: single("tx-events") ?? 10,
    flow: { eagerLimit: single("eager-limit"), backpressureMs: single("backpressure") }
  }
}

/** What a queue and the outbox held after a run. */
interface Check {
  /** Events that never reached the queue. */
  readonly lost: number
  /** Extra copies in the queue (an event published twice). */
  readonly duplicates: number
}

/** One measured drain. */
interface Drain extends Check {
  readonly perSecond: number
  readonly seconds: number
}

/** A drain by the Tidings relay, with what its publisher saw. */
interface TidingsDrain extends Drain {
  readonly maxInFlight: number
  readonly drainWaits: number
}

/** One tidings-vs-raw comparison, as printed in the JSON output. */
export interface Run extends Setting {
  readonly tidingsPerSecond: number
  /** The better raw mode; `ratio` = tidings / raw. */
  readonly rawPerSecond: number
  readonly ratio: number
  readonly rawWindowPerSecond: number
  readonly rawBatchesPerSecond: number
  /** Confirms in flight: the raw window, and the most the `AmqpPublisher` had at once. */
  readonly window: number
  readonly tidingsMaxInFlight: number
  /** Times the `AmqpPublisher` waited for amqplib's write buffer to drain. */
  readonly drainWaits: number
  readonly tidingsSeconds: number
  readonly rawSeconds: number
  readonly lost: number
  readonly duplicates: number
}

/**
 * A run with producers appending while the relays publish: `saturated` (as fast as they can, the
 * backlog grows) or `loaded` (paced at `rate`). Latency is commit → confirm per event.
 */
export interface LoadRun {
  /** Offered events per second; null: as fast as the producers can. */
  readonly rate: number | null
  readonly producers: number
  readonly eventsPerTransaction: number
  /** The measured window (after a 1 s warm-up when paced). */
  readonly seconds: number
  /** Events committed per second by the producers, and confirmed per second, in the window. */
  readonly appendedPerSecond: number
  readonly confirmedPerSecond: number
  /** Events committed but not yet confirmed when the producers stopped. */
  readonly backlog: number
  readonly p50Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  /** p99 of the events committed in the window's first second (before a backlog could build up). */
  readonly firstSecondP99Ms: number
  /** Events measured. */
  readonly events: number
  /** Of every event appended (warm-up included). */
  readonly lost: number
  readonly duplicates: number
}

/** The JSON output of `bench publish`. */
export interface Result {
  readonly publish: Setting & {
    /** Of the setting with the best `tidingsPerSecond`; null with `--phase saturated`. */
    readonly tidingsPerSecond: number | null
    readonly rawPerSecond: number | null
    readonly ratio: number | null
    readonly saturatedP99Ms: number | null
    /** Commit → confirm p99 at `loadedRate` events/s (80% of what the relays confirmed while saturated). */
    readonly loadedP99Ms: number | null
    readonly loadedRate: number | null
    readonly lost: number
    readonly duplicates: number
    readonly events: number
  }
  readonly runs: ReadonlyArray<Run>
  readonly saturated: LoadRun | null
  readonly loaded: LoadRun | null
  readonly meta: Record<string, unknown>
}

/** Rows per status. */
const counts = (schema: string) =>
  SqlClient.SqlClient.use((sql) =>
    sql<{ status: string; n: number }>`SELECT status, count(*)::int AS n FROM ${
      sql(`${schema}.outbox`)
    } GROUP BY status`
  ).pipe(Effect.map((rows) => new Map(rows.map((r) => [r.status, Number(r.n)]))), Effect.orDie)

/**
 * Reads the queue back and compares with `ids`: every event exactly once. A failed check is
 * reported and sets exit code 1.
 */
const checkQueue = (url: string, queue: string, ids: ReadonlyArray<string>, label: string): Effect.Effect<Check> =>
  Effect.gen(function*() {
    const got = yield* Rabbit.collect(url, queue, ids)
    const result: Check = { lost: got.missing, duplicates: got.received - got.distinct }
    if (result.lost > 0 || result.duplicates > 0 || got.distinct !== ids.length) {
      log(
        `  ! ${label}: ${int(ids.length)} events, the queue had ${int(got.received)} messages (${
          int(got.distinct)
        } distinct, ${int(got.missing)} missing)`
      )
      process.exitCode = 1
    }
    return result
  })

/** Checks that the outbox has all `events` published and nothing else (sets exit code 1 if not). */
const checkOutbox = (schema: string, events: number, label: string) =>
  Effect.gen(function*() {
    const byStatus = yield* counts(schema)
    if ((byStatus.get("published") ?? 0) !== events || byStatus.size !== 1) {
      log(`  ! ${label}: ${int(events)} events but the outbox has ${JSON.stringify(Object.fromEntries(byStatus))}`)
      process.exitCode = 1
    }
  })

/** Eager dispatch's flow control in the runs under load (`--eager-limit`, `--backpressure`). */
interface Flow {
  readonly eagerLimit: number | undefined
  /** Producer flow control: how long a commit may wait for room; undefined: off. */
  readonly backpressureMs: number | undefined
}
const noFlow: Flow = { eagerLimit: undefined, backpressureMs: undefined }

/** Starts `Relay.layer` for the scope: `setting.relays` pollers publishing through `publisher`, woken by `hub`. */
const startRelay = (
  setting: Setting,
  store: OutboxStorePort.Service,
  publisher: PublisherPort.Service,
  hub: Wakeup.Service,
  flow: Flow = noFlow
) =>
  Layer.build(
    Relay.layer({
      name: "bench",
      concurrency: setting.relays,
      batchSize: setting.batch,
      statsInterval: false,
      retention: false,
      ...(flow.eagerLimit === undefined ? {} : { eagerLimit: flow.eagerLimit }),
      ...(flow.backpressureMs === undefined ? {} : { backpressure: Duration.millis(flow.backpressureMs) })
    }).pipe(
      Layer.provide(Layer.mergeAll(
        Layer.succeed(OutboxStore)(store),
        Layer.succeed(Publisher)(publisher),
        Layer.succeed(Wakeup.Wakeups)(hub)
      ))
    )
  ).pipe(Effect.orDie)

/**
 * The Tidings relay drains `msgs` pre-inserted as pending events into a fresh classic queue. The
 * clock runs from starting the relay layer until every event's publish was confirmed.
 */
const tidings = (
  pgUrl: string,
  amqpUrl: string,
  setting: Setting,
  msgs: ReadonlyArray<Message>
): Effect.Effect<TidingsDrain> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(pgUrl, setting.relays + 2)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("publish")
      const store = yield* PgOutboxStore.make({ schema }).pipe(Effect.orDie)
      yield* Pg.checkpoint
      yield* Seed.insertPending(store, msgs)
      yield* Pg.analyze(schema)
      const queue = yield* Rabbit.freshQueue(amqpUrl, "publish", "classic")
      const connection = yield* Rabbit.connection(amqpUrl, "bench-relay")
      const amqp = yield* Rabbit.publisher(connection, Rabbit.exchangeOf(queue), setting.channels)
      const tally = new Tally()
      const seconds = yield* Effect.scoped(Effect.gen(function*() {
        const start = performance.now()
        // A private hub: nothing signals it; the pollers' first claims start at once and full
        // batches are followed by the next claim without waiting.
        yield* startRelay(setting, store, counting(amqp, tally), Wakeup.makeHub())
        while (tally.total < msgs.length) yield* Effect.sleep("1 millis")
        return (performance.now() - start) / 1000
      }))
      const result = yield* checkQueue(amqpUrl, queue.queue, msgs.map((m) => m.id), "tidings")
      yield* checkOutbox(schema, msgs.length, "tidings")
      return {
        perSecond: Math.round(msgs.length / seconds),
        seconds,
        maxInFlight: yield* amqp.maxInFlight,
        drainWaits: yield* amqp.drainWaits,
        ...result
      }
    }).pipe(Effect.provideContext(context))
  }))

/**
 * How raw amqplib keeps `relays × batch` confirms in flight: `window` slides (each confirm lets the
 * next message go); `batches` runs `relays` loops that each publish `batch` messages and wait for
 * all their confirms, as the relay does but without the database.
 */
export type RawMode = "window" | "batches"

/**
 * Raw amqplib: the same messages on `channels` confirm channels into a fresh classic queue. The
 * end-to-end phase uses it as the broker's own ceiling (no database at all).
 */
export const raw = (
  amqpUrl: string,
  setting: Setting,
  mode: RawMode,
  msgs: ReadonlyArray<Message>
): Effect.Effect<Drain> =>
  Effect.scoped(Effect.gen(function*() {
    const queue = yield* Rabbit.freshQueue(amqpUrl, "raw", "classic")
    const exchange = Rabbit.exchangeOf(queue)
    const model = yield* Rabbit.rawConnection(amqpUrl)
    const channels = yield* Effect.forEach(Array.from({ length: setting.channels }), () =>
      Effect.promise(async () => {
        const channel = await model.createConfirmChannel()
        channel.on("error", () => undefined)
        return channel
      }))
    let next = 0
    let failed = 0
    // Encoded while publishing, as the AmqpPublisher does per batch: part of the cost being compared.
    const encode = (i: number) => Rabbit.outgoing(msgs[i]!, exchange)
    const onConfirm = (error: unknown) => void (error !== null && error !== undefined && failed++)

    const sliding = (channel: ConfirmChannel, size: number) =>
      new Promise<void>((resolve) => {
        let inFlight = 0
        let blocked = false
        const pump = () => {
          blocked = false
          while (inFlight < size && next < msgs.length) {
            const m = encode(next++)
            inFlight++
            const ok = channel.publish(m.exchange, m.routingKey, m.content, m.options, (error: unknown) => {
              onConfirm(error)
              inFlight--
              if (inFlight === 0 && next >= msgs.length) resolve()
              else if (!blocked) pump()
            })
            if (!ok) {
              // amqplib's write buffer is full: continue on 'drain', as the AmqpPublisher does.
              blocked = true
              channel.once("drain", pump)
              return
            }
          }
          if (inFlight === 0) resolve()
        }
        pump()
      })

    const batches = async (channel: ConfirmChannel) => {
      while (next < msgs.length) {
        const from = next
        const to = Math.min(msgs.length, from + setting.batch)
        next = to
        let pending = to - from
        let confirmed!: () => void
        const all = new Promise<void>((resolve) => (confirmed = resolve))
        const callback = (error: unknown) => {
          onConfirm(error)
          if (--pending === 0) confirmed()
        }
        for (let i = from; i < to; i++) {
          const m = encode(i)
          if (!channel.publish(m.exchange, m.routingKey, m.content, m.options, callback)) {
            await new Promise((resolve) => channel.once("drain", resolve))
          }
        }
        await all
      }
    }

    const window = setting.relays * setting.batch
    const start = performance.now()
    yield* Effect.promise(() =>
      mode === "window"
        ? Promise.all(channels.map((c) => sliding(c, Math.ceil(window / channels.length))))
        : Promise.all(Array.from({ length: setting.relays }, (_, i) => batches(channels[i % channels.length]!)))
    )
    const seconds = (performance.now() - start) / 1000
    if (failed > 0) {
      log(`  ! raw ${mode}: ${failed} messages were nacked`)
      process.exitCode = 1
    }
    // The ids are distinct by construction: the queue depth tells whether each arrived once.
    const depth = yield* Rabbit.depth(amqpUrl, queue.queue)
    if (depth !== msgs.length) {
      log(`  ! raw ${mode}: ${int(msgs.length)} messages published, the queue has ${int(depth)}`)
      process.exitCode = 1
    }
    return {
      perSecond: Math.round(msgs.length / seconds),
      seconds,
      lost: Math.max(0, msgs.length - depth),
      duplicates: Math.max(0, depth - msgs.length)
    }
  }))

/**
 * Producers append (`txEvents` events per transaction) for `seconds` while the relays publish
 * (woken after each commit by the in-process hub, as in an application), and every event's
 * commit → confirm is recorded. `rate` undefined: as fast as the producers can (saturated: the
 * backlog grows); otherwise paced at `rate` events/s after a 1 s unmeasured warm-up. Then the rest
 * is drained and checked.
 */
const underLoad = (
  pgUrl: string,
  amqpUrl: string,
  setting: Setting,
  opts: Options,
  rate: number | undefined
): Effect.Effect<LoadRun> =>
  Effect.scoped(Effect.gen(function*() {
    const label = rate === undefined ? "saturated" : "loaded"
    const context = yield* Pg.openPool(pgUrl, opts.producers + setting.relays + 2)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema(label)
      const store = yield* PgOutboxStore.make({ schema }).pipe(Effect.orDie)
      const queue = yield* Rabbit.freshQueue(amqpUrl, label, "classic")
      const connection = yield* Rabbit.connection(amqpUrl, "bench-relay")
      const amqp = yield* Rabbit.publisher(connection, Rabbit.exchangeOf(queue), setting.channels)
      const tracker = new LatencyTracker()
      const firstSecond = new LatencyTracker()
      const warmup = rate === undefined ? 0 : 1_000
      let confirmedInWindow = 0
      let from = Number.POSITIVE_INFINITY
      let until = Number.POSITIVE_INFINITY
      const publisher = timing(amqp, (id, at) => {
        tracker.received(id, at)
        firstSecond.received(id, at)
        if (at >= from && at <= until) confirmedInWindow++
      })
      const ids: Array<string> = []
      let appendedInWindow = 0
      let window = 0
      let backlog = 0
      // The relays run in a scope of their own: closing it lets the last settle finish before the outbox is checked.
      yield* Effect.scoped(Effect.gen(function*() {
        yield* startRelay(setting, store, publisher, yield* Wakeup.Wakeups, opts.flow)
        const start = performance.now()
        from = start + warmup
        until = from + opts.loadSeconds * 1000
        let k = 0
        let tx = 0
        yield* Effect.forEach(Array.from({ length: opts.producers }), () =>
          Effect.gen(function*() {
            while (true) {
              // Paced: transaction j is due at start + j × txEvents / rate, so a late one does not lower the rate.
              const due = rate === undefined ? performance.now() : start + (tx++ * opts.txEvents * 1000) / rate
              if (due >= until) return
              const wait = due - performance.now()
              if (wait > 0) yield* Effect.sleep(wait)
              const drafts = Array.from({ length: opts.txEvents }, () => Seed.OrderPlaced.make(Seed.input(k++)))
              // Stamped by the first after-commit hook: the moment of the commit, before any wait for
              // the relay's room (backpressure) that `Outbox.append`'s own hook may add.
              let at = 0
              const messages = yield* Outbox.transaction(Effect.andThen(
                store.afterCommit(Effect.sync(() => void (at = performance.now()))),
                Outbox.appendAll(drafts)
              ))
              const measured = due >= from
              if (measured) appendedInWindow += messages.length
              for (const m of messages) {
                ids.push(m.id)
                tracker.committed(m.id, at, measured)
                firstSecond.committed(m.id, at, measured && due < from + 1000)
              }
            }
          }), { concurrency: "unbounded", discard: true }).pipe(Effect.provideService(OutboxStore, store), Effect.orDie)
        window = (performance.now() - from) / 1000
        backlog = tracker.outstanding
        if (!(yield* waitFor(() => tracker.outstanding === 0, 120_000))) {
          log(`  ! ${label}: ${int(tracker.outstanding)} events were not confirmed within 120 s`)
          process.exitCode = 1
        }
      }))
      const result = yield* checkQueue(amqpUrl, queue.queue, ids, label)
      yield* checkOutbox(schema, ids.length, label)
      const s = sorted(tracker.latencies)
      const first = sorted(firstSecond.latencies)
      return {
        rate: rate ?? null,
        producers: opts.producers,
        eventsPerTransaction: opts.txEvents,
        seconds: round(window, 2),
        appendedPerSecond: Math.round(appendedInWindow / window),
        confirmedPerSecond: Math.round(confirmedInWindow / window),
        backlog,
        p50Ms: round(percentile(s, 50)),
        p95Ms: round(percentile(s, 95)),
        p99Ms: round(percentile(s, 99)),
        maxMs: round(percentile(s, 100)),
        firstSecondP99Ms: round(percentile(first, 99)),
        events: s.length,
        ...result
      } satisfies LoadRun
    }).pipe(Effect.provideContext(context))
  }))

const describe = (s: Setting) => `relays=${s.relays} batch=${s.batch} channels=${s.channels}`

/** Runs the publish benchmark: into RabbitMQ (the default) or, with `--transport webhooks`, into a webhook receiver. */
export const run = (
  opts: Options | PublishWebhooks.Options
): Effect.Effect<Result | PublishWebhooks.Result, never, Scope.Scope> =>
  "transport" in opts ? PublishWebhooks.run(opts) : runRabbitmq(opts)

/** Runs the publish benchmark against a fresh durable PostgreSQL and RabbitMQ broker. */
const runRabbitmq = (opts: Options): Effect.Effect<Result, never, Scope.Scope> =>
  Effect.gen(function*() {
    // Both servers start at once: RabbitMQ takes ~10 s to boot.
    const [server, broker] = yield* Effect.all([Pg.server, Rabbit.broker], { concurrency: 2 })
    const started = performance.now()
    const loadBefore = os.loadavg()[0]!
    log(
      `publish: ${int(opts.events)} events per run, ${
        opts.throughput ? opts.settings.length : 0
      } setting(s) × ${opts.rounds} round(s) of tidings + raw; saturated and loaded runs of ${opts.loadSeconds} s`
    )
    const msgs = yield* Seed.messages(opts.throughput ? opts.events : 5_000)

    // Warm-up (not reported): JIT, the broker's and the server's first queues and tables.
    const warm = msgs.slice(0, Math.min(5_000, msgs.length))
    yield* tidings(server.url, broker.url, opts.settings[0]!, warm)
    if (opts.throughput) {
      yield* raw(broker.url, opts.settings[0]!, "window", warm)
      yield* raw(broker.url, opts.settings[0]!, "batches", warm)
    }

    const runs: Array<Run> = []
    for (const setting of opts.throughput ? opts.settings : []) {
      const t: Array<TidingsDrain> = []
      const w: Array<Drain> = []
      const b: Array<Drain> = []
      // Alternating rounds, so that drift (other load on the machine) hits all alike; best of each.
      for (let i = 0; i < opts.rounds; i++) {
        t.push(yield* tidings(server.url, broker.url, setting, msgs))
        w.push(yield* raw(broker.url, setting, "window", msgs))
        b.push(yield* raw(broker.url, setting, "batches", msgs))
        log(
          `  ${describe(setting)}  tidings ${int(t.at(-1)!.perSecond)}/s  raw window ${
            int(w.at(-1)!.perSecond)
          }/s  raw batches ${int(b.at(-1)!.perSecond)}/s  (max in flight ${int(t.at(-1)!.maxInFlight)})`
        )
      }
      const best = <A extends Drain>(xs: ReadonlyArray<A>) => xs.reduce((x, y) => (y.perSecond > x.perSecond ? y : x))
      const bestT = best(t)
      const bestR = best([...w, ...b])
      runs.push({
        ...setting,
        tidingsPerSecond: bestT.perSecond,
        rawPerSecond: bestR.perSecond,
        ratio: round(bestT.perSecond / bestR.perSecond, 3),
        rawWindowPerSecond: best(w).perSecond,
        rawBatchesPerSecond: best(b).perSecond,
        window: setting.relays * setting.batch,
        tidingsMaxInFlight: Math.max(...t.map((x) => x.maxInFlight)),
        drainWaits: bestT.drainWaits,
        tidingsSeconds: round(bestT.seconds, 3),
        rawSeconds: round(bestR.seconds, 3),
        lost: [...t, ...w, ...b].reduce((n, x) => n + x.lost, 0),
        duplicates: [...t, ...w, ...b].reduce((n, x) => n + x.duplicates, 0)
      })
    }
    const top = runs.length === 0 ? undefined : runs.reduce((a, b) => (b.tidingsPerSecond > a.tidingsPerSecond ? b : a))
    // The runs under load use the best setting.
    const setting: Setting = top === undefined
      ? opts.settings[0]!
      : { relays: top.relays, batch: top.batch, channels: top.channels }

    const describeLoad = (r: LoadRun) =>
      `appended ${int(r.appendedPerSecond)}/s, confirmed ${int(r.confirmedPerSecond)}/s, commit → confirm p50 ${
        ms(r.p50Ms)
      } ms p99 ${ms(r.p99Ms)} ms (first second p99 ${ms(r.firstSecondP99Ms)} ms), backlog ${int(r.backlog)}`
    const sat = opts.saturated ? yield* underLoad(server.url, broker.url, setting, opts, undefined) : null
    if (sat !== null) log(`  saturated (${describe(setting)}): ${describeLoad(sat)}`)
    // Paced below what the relays managed while saturated: the latency of a busy, not overrun, relay.
    const loadedRate = opts.loadedRate ??
      (sat === null ? 2_000 : Math.max(100, Math.round((sat.confirmedPerSecond * 0.8) / 100) * 100))
    const loaded = opts.loaded ? yield* underLoad(server.url, broker.url, setting, opts, loadedRate) : null
    if (loaded !== null) log(`  loaded ${int(loadedRate)}/s (${describe(setting)}): ${describeLoad(loaded)}`)

    log("")
    if (runs.length > 0) {
      log(
        `outbox → RabbitMQ classic queue, ${
          int(opts.events)
        } events per run, best of ${opts.rounds} (RabbitMQ ${broker.version}, PostgreSQL ${server.version}, fsync=${server.fsync})`
      )
      table(
        [
          "relays",
          "batch",
          "channels",
          "in flight",
          "tidings/s",
          "raw window/s",
          "raw batches/s",
          "ratio",
          "lost",
          "dup"
        ],
        runs.map((r) => [
          String(r.relays),
          String(r.batch),
          String(r.channels),
          int(r.window),
          int(r.tidingsPerSecond),
          int(r.rawWindowPerSecond),
          int(r.rawBatchesPerSecond),
          `${Math.round(r.ratio * 100)}%`,
          String(r.lost),
          String(r.duplicates)
        ])
      )
    }
    const loadRuns = [sat, loaded].filter((r): r is LoadRun => r !== null)
    if (loadRuns.length > 0) {
      log("")
      log(
        `commit → confirm with producers appending (${opts.producers} producers × ${opts.txEvents} events per transaction, ${
          secs(opts.loadSeconds)
        } s), ${describe(setting)}`
      )
      table(
        [
          "producers",
          "appended/s",
          "confirmed/s",
          "backlog",
          "p50 ms",
          "p95 ms",
          "p99 ms",
          "max ms",
          "1st s p99",
          "lost",
          "dup"
        ],
        loadRuns.map((r) => [
          r.rate === null ? "saturated" : `${int(r.rate)}/s`,
          int(r.appendedPerSecond),
          int(r.confirmedPerSecond),
          int(r.backlog),
          ms(r.p50Ms),
          ms(r.p95Ms),
          ms(r.p99Ms),
          ms(r.maxMs),
          ms(r.firstSecondP99Ms),
          String(r.lost),
          String(r.duplicates)
        ])
      )
    }
    log(
      `total ${secs((performance.now() - started) / 1000)} s; load average ${loadBefore.toFixed(1)} before, ${
        os.loadavg()[0]!.toFixed(1)
      } after (${os.cpus().length} cores)`
    )
    return {
      publish: {
        ...setting,
        tidingsPerSecond: top?.tidingsPerSecond ?? null,
        rawPerSecond: top?.rawPerSecond ?? null,
        ratio: top?.ratio ?? null,
        saturatedP99Ms: sat?.p99Ms ?? null,
        loadedP99Ms: loaded?.p99Ms ?? null,
        loadedRate: loaded === null ? null : loadedRate,
        lost: runs.reduce((n, r) => n + r.lost, 0) + loadRuns.reduce((n, r) => n + r.lost, 0),
        duplicates: runs.reduce((n, r) => n + r.duplicates, 0) + loadRuns.reduce((n, r) => n + r.duplicates, 0),
        events: opts.events
      },
      runs,
      saturated: sat,
      loaded,
      meta: {
        events: opts.events,
        rounds: opts.rounds,
        queue: "classic",
        quick: opts.quick,
        rabbitmq: broker.version,
        postgres: server.version,
        fsync: server.fsync,
        synchronousCommit: server.synchronousCommit,
        node: process.version,
        // Other work on the machine skews every number here: the 1-minute load average before and after.
        loadAverage: [round(loadBefore, 2), round(os.loadavg()[0]!, 2)],
        cpus: os.cpus().length
      }
    }
  })
