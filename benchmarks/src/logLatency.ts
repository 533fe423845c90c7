/**
 * Log mode latency under a paced load: producers append one event per transaction through the log
 * store's `OutboxStore` face (`PgLogStore`, `notify: true`) on a fixed schedule, and
 * - `otherProcess`: a `LogRelay` in another process (`logWorker.ts`), woken by `NOTIFY` through
 *   `PgWakeup`, publishes to the in-memory broker: commit → publish, both stamped on the machine's
 *   monotonic clock; with `reader: "floor"`, a bare postgres.js reader (`logFloorWorker.ts`: LISTEN,
 *   read below the horizon, no bookkeeping) in its place, the floor of this path on this machine;
 * - `rabbit`: a `LogRelay` in the producers' process (woken after commit) publishes through
 *   `AmqpPublisher` to a fresh classic queue: commit → the broker's confirm.
 * Settings are the relay's defaults (concurrency 2, batch 500) with the suite's producers.
 * @module
 */
import * as LogRelay from "@tidings/core/LogRelay"
import * as LogStore from "@tidings/core/LogStore"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import * as PgLogStore from "@tidings/postgres/PgLogStore"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { Duration, Effect, Layer } from "effect"
import { fork } from "node:child_process"
import { fileURLToPath } from "node:url"
import { LatencyTracker, waitFor } from "./latency.ts"
import { monotonicMs } from "./lib/monotonic.ts"
import * as Pg from "./lib/postgres.ts"
import { timing } from "./lib/publishers.ts"
import * as Rabbit from "./lib/rabbit.ts"
import { log } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { percentile, round, sorted } from "./lib/stats.ts"
import type { FromLogWorker, ToLogWorker } from "./logWorker.ts"

/** Settings of a paced log run. */
export interface Options {
  readonly rate: number
  readonly duration: number
  readonly warmup: number
  readonly producers: number
}

/** What a paced log run reports (the suite's latency sample shape). */
export interface Sample {
  readonly p50Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  readonly achievedRate: number
  readonly events: number
  readonly lost: number
  readonly duplicates: number
  /** CPU time of the reading process (relay or floor reader) per event it read, in µs: only for `otherProcess`. */
  readonly readerCpuUsPerEvent?: number
}

const workerPath = fileURLToPath(new URL("./logWorker.ts", import.meta.url))
const floorPath = fileURLToPath(new URL("./logFloorWorker.ts", import.meta.url))

/**
 * Paced producers: event k is committed at `start + k / rate` (late transactions do not slow the
 * schedule), spread over `producers` fibers; `append(k)` commits one and returns its id; the commit
 * time (monotonic clock) goes to `tracker`.
 */
const pace = (
  opts: Options,
  tracker: LatencyTracker,
  append: (k: number) => Effect.Effect<string, unknown, OutboxStore>
) =>
  Effect.gen(function*() {
    const total = Math.round(opts.rate * (opts.warmup + opts.duration))
    const start = monotonicMs() + 20
    const measuredFrom = start + opts.warmup * 1000
    let measured = 0
    let last = measuredFrom
    const producer = (first: number) =>
      Effect.gen(function*() {
        for (let k = first; k < total; k += opts.producers) {
          const target = start + (k * 1000) / opts.rate
          const wait = target - monotonicMs()
          if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
          const id = yield* append(k)
          const at = monotonicMs()
          const inWindow = target >= measuredFrom
          tracker.committed(id, at, inWindow)
          if (inWindow) {
            measured++
            last = Math.max(last, at)
          }
        }
      })
    yield* Effect.forEach(Array.from({ length: opts.producers }, (_, i) => i), producer, {
      concurrency: "unbounded",
      discard: true
    }).pipe(Effect.orDie)
    return Math.round(measured / Math.max(0.001, (last - measuredFrom) / 1000))
  })

const summary = (tracker: LatencyTracker, achievedRate: number): Sample => {
  const s = sorted(tracker.latencies)
  return {
    p50Ms: round(percentile(s, 50)),
    p95Ms: round(percentile(s, 95)),
    p99Ms: round(percentile(s, 99)),
    maxMs: round(percentile(s, 100)),
    achievedRate,
    events: s.length,
    lost: tracker.outstanding,
    duplicates: tracker.duplicates
  }
}

const appendWith = (k: number) =>
  Effect.map(Outbox.transaction(Outbox.append(Seed.OrderPlaced, Seed.input(k))), (m) => m.id)

/**
 * Commit → publish with the relay in another process, woken by NOTIFY; or, with `reader: "floor"`,
 * commit → read by a bare reader in another process (the same producers, schema and NOTIFY).
 */
export const otherProcess = (url: string, opts: Options, reader: "relay" | "floor" = "relay"): Effect.Effect<Sample> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, opts.producers + 2)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("loglat")
      const stores = yield* PgLogStore.make({ schema, notify: true }).pipe(Effect.orDie)
      const tracker = new LatencyTracker()
      const name = reader === "floor" ? "floor reader" : "log relay"
      let held = 0
      let cpuMs = 0
      let done!: () => void
      const finished = new Promise<void>((resolve) => (done = resolve))
      const child = yield* Effect.acquireRelease(
        Effect.sync(() =>
          fork(
            reader === "floor" ? floorPath : workerPath,
            reader === "floor"
              ? [url, schema, PgOutboxStore.channel(schema)]
              : [url, schema, "latency", "2", "500", "30000", "1"],
            { stdio: ["ignore", "ignore", "inherit", "ipc"], execArgv: [] }
          )
        ),
        (c) => Effect.sync(() => void (c.exitCode === null && c.kill()))
      )
      child.on("message", (m: FromLogWorker) => {
        if (m.type === "held") held = m.partitions
        else if (m.type === "published") m.ids.forEach((id, i) => tracker.received(id, m.at[i]!))
        else if (m.type === "done") {
          cpuMs = m.cpuMs
          done()
        } else if (m.type === "failed") log(`  ! ${name} process failed: ${m.error}`)
      })
      if (!(yield* waitFor(() => held === stores.log.partitions, 60_000))) {
        log(`  ! the ${name} process did not start`)
      }
      const achieved = yield* pace(opts, tracker, appendWith).pipe(Effect.provideService(OutboxStore, stores.outbox))
      yield* waitFor(() => tracker.outstanding === 0, 10_000)
      child.send({ type: "stop" } satisfies ToLogWorker)
      yield* Effect.promise(() => finished)
      // Every event appended (warm-up included) was read while the CPU time was counted.
      const appended = Math.round(opts.rate * (opts.warmup + opts.duration))
      return { ...summary(tracker, achieved), readerCpuUsPerEvent: round((cpuMs * 1000) / Math.max(1, appended)) }
    }).pipe(Effect.provideContext(context))
  }))

/** Commit → RabbitMQ confirm, the log relay in the producers' process (woken after commit). */
export const rabbit = (url: string, rabbitUrl: string, opts: Options): Effect.Effect<Sample> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, opts.producers + 4)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("lograb")
      const stores = yield* PgLogStore.make({ schema }).pipe(Effect.orDie)
      const queue = yield* Rabbit.freshQueue(rabbitUrl, "loglat", "classic")
      const amqp = yield* Rabbit.publisher(
        yield* Rabbit.connection(rabbitUrl, "bench-log-relay"),
        Rabbit.exchangeOf(queue),
        1
      )
      const tracker = new LatencyTracker()
      const publisher = timing(amqp, (id) => tracker.received(id, monotonicMs()))
      yield* Layer.build(
        LogRelay.layer({ group: "latency", statsInterval: false, retention: false }).pipe(
          Layer.provide(
            Layer.mergeAll(
              Layer.succeed(LogStore.LogStore)(stores.log),
              Layer.succeed(OutboxStore)(stores.outbox),
              Layer.succeed(Publisher)(publisher)
            )
          )
        )
      ).pipe(Effect.orDie)
      const achieved = yield* pace(opts, tracker, appendWith).pipe(Effect.provideService(OutboxStore, stores.outbox))
      yield* waitFor(() => tracker.outstanding === 0, 10_000)
      return summary(tracker, achieved)
    }).pipe(Effect.provideContext(context))
  }))
