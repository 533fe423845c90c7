/**
 * End to end into RabbitMQ, against what a user would otherwise pick for an outbox. A backlog of
 * events is moved into a fresh classic queue with publisher confirms by:
 * - `tidings-row`: `Relay.layer` (the publish benchmark's setting: 4 pollers, batch 1,000) with
 *   `AmqpPublisher` on the outbox table;
 * - `tidings-log`: `LogRelay.layer` (its defaults) with `AmqpPublisher` on the log;
 * - `graphile-worker`: `run()` with a task that publishes its job on a confirm channel and waits for
 *   the confirm (several configurations, the best counts);
 * - `pg-boss`: `work()` whose handler publishes each job of its batch and waits for the confirms.
 * Every drain is checked by reading the queue back: each event exactly once.
 *
 * Then latency under a paced load into RabbitMQ (log mode, 10 events per transaction): the highest
 * paced rate whose commit → confirm p99 stays under 50 ms, against the rate the relay drains a
 * backlog, and the producers' own limit (the same producers with no relay running).
 * @module
 */
import * as LogRelay from "@tidings/core/LogRelay"
import * as LogStore from "@tidings/core/LogStore"
import type { Message } from "@tidings/core/Message"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as Wakeup from "@tidings/core/Wakeup"
import * as PgLogStore from "@tidings/postgres/PgLogStore"
import { Duration, Effect, Layer, type Scope } from "effect"
import * as Claim from "./claim.ts"
import { LatencyTracker, waitFor } from "./latency.ts"
import { monotonicMs } from "./lib/monotonic.ts"
import * as Pg from "./lib/postgres.ts"
import { counting, Tally, timing } from "./lib/publishers.ts"
import * as Rabbit from "./lib/rabbit.ts"
import { log } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { percentile, round, sorted } from "./lib/stats.ts"
import { partitions } from "./logMode.ts"

/** One backlog moved into RabbitMQ. */
export interface E2eDrain {
  readonly events: number
  readonly seconds: number
  readonly eventsPerSecond: number
  /** Events missing from the queue, and copies beyond the first, when it was read back. */
  readonly lost: number
  readonly duplicates: number
}

/** Reads the queue back and turns what it held into the drain's result. */
export const checked = (rabbitUrl: string, queue: string, ids: ReadonlyArray<string>, seconds: number) =>
  Effect.map(Rabbit.collect(rabbitUrl, queue, ids), (c): E2eDrain => ({
    events: ids.length - c.missing,
    seconds: round(seconds, 3),
    eventsPerSecond: Math.round((ids.length - c.missing) / seconds),
    lost: c.missing,
    duplicates: c.received - c.distinct
  }))

/** A Tidings relay (row or log mode) moves `msgs` from a fresh table into a fresh queue. */
export const tidingsDrain = (
  url: string,
  rabbitUrl: string,
  mode: "row" | "log",
  msgs: ReadonlyArray<Message>
): Effect.Effect<E2eDrain> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, 8)
    return yield* Effect.gen(function*() {
      const queue = yield* Rabbit.freshQueue(rabbitUrl, `e2e-${mode}`, "classic")
      const amqp = yield* Rabbit.publisher(
        yield* Rabbit.connection(rabbitUrl, `bench-e2e-${mode}`),
        Rabbit.exchangeOf(queue),
        1
      )
      const tally = new Tally()
      const publisher = counting(amqp, tally)
      const hub = Layer.succeed(Wakeup.Wakeups)(Wakeup.makeHub())
      let relay: Effect.Effect<unknown, never, Scope.Scope>
      if (mode === "row") {
        const { store } = yield* Claim.prepare("clean", msgs)
        relay = Layer.build(
          Relay.layer({ name: "e2e", concurrency: 4, batchSize: 1_000, statsInterval: false, retention: false }).pipe(
            Layer.provide(Layer.mergeAll(Layer.succeed(OutboxStore)(store), Layer.succeed(Publisher)(publisher), hub))
          )
        ).pipe(Effect.orDie)
      } else {
        const schema = yield* Pg.freshSchema("e2elog")
        const stores = yield* PgLogStore.make({ schema, partitions }).pipe(Effect.orDie)
        for (let i = 0; i < msgs.length; i += 1_000) {
          yield* stores.outbox.withTransaction(stores.outbox.append(msgs.slice(i, i + 1_000))).pipe(Effect.orDie)
        }
        relay = Layer.build(
          LogRelay.layer({ group: "e2e", statsInterval: false, retention: false }).pipe(
            Layer.provide(
              Layer.mergeAll(
                Layer.succeed(LogStore.LogStore)(stores.log),
                Layer.succeed(OutboxStore)(stores.outbox),
                Layer.succeed(Publisher)(publisher),
                hub
              )
            )
          )
        ).pipe(Effect.orDie)
      }
      const start = performance.now()
      yield* Effect.scoped(Effect.gen(function*() {
        yield* relay
        if (!(yield* waitFor(() => tally.total >= msgs.length, 180_000))) {
          log(`  ! e2e ${mode}: ${tally.total} of ${msgs.length} confirmed`)
        }
      }))
      return yield* checked(rabbitUrl, queue.queue, msgs.map((m) => m.id), (performance.now() - start) / 1000)
    }).pipe(Effect.provideContext(context))
  }))

/** Settings of the paced log-mode runs into RabbitMQ. */
export interface PacedOptions {
  readonly duration: number
  readonly warmup: number
  readonly producers: number
  /** Events per producer transaction. */
  readonly txEvents: number
}

/** One paced run: commit → confirm, or (without a relay) only the producers. */
export interface PacedRun {
  readonly rate: number
  readonly achievedRate: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly lost: number
}

/**
 * Producers append `txEvents` events per transaction to a fresh log on a schedule of `rate`
 * events/s (late transactions do not slow it down); with `relay`, a `LogRelay` in this process
 * publishes them into a fresh queue and each event's commit → confirm is recorded.
 */
export const paced = (
  url: string,
  rabbitUrl: string,
  rate: number,
  opts: PacedOptions,
  relay = true
): Effect.Effect<PacedRun> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, opts.producers + 4)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("e2epaced")
      const stores = yield* PgLogStore.make({ schema, partitions }).pipe(Effect.orDie)
      const tracker = new LatencyTracker()
      if (relay) {
        const queue = yield* Rabbit.freshQueue(rabbitUrl, "e2e-paced", "classic")
        const amqp = yield* Rabbit.publisher(
          yield* Rabbit.connection(rabbitUrl, "bench-e2e-paced"),
          Rabbit.exchangeOf(queue),
          1
        )
        yield* Layer.build(
          LogRelay.layer({ group: "paced", statsInterval: false, retention: false }).pipe(
            Layer.provide(Layer.mergeAll(
              Layer.succeed(LogStore.LogStore)(stores.log),
              Layer.succeed(OutboxStore)(stores.outbox),
              Layer.succeed(Publisher)(timing(amqp, (id) => tracker.received(id, monotonicMs())))
            ))
          )
        ).pipe(Effect.orDie)
      }
      const txs = Math.round((rate * (opts.warmup + opts.duration)) / opts.txEvents)
      const start = monotonicMs() + 20
      const measuredFrom = start + opts.warmup * 1000
      let measured = 0
      let last = measuredFrom
      let k = 0
      const producer = (first: number) =>
        Effect.gen(function*() {
          for (let t = first; t < txs; t += opts.producers) {
            const target = start + (t * opts.txEvents * 1000) / rate
            const wait = target - monotonicMs()
            if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
            const drafts = Array.from({ length: opts.txEvents }, () => Seed.OrderPlaced.make(Seed.input(k++)))
            const written = yield* Outbox.transaction(Outbox.appendAll(drafts))
            const at = monotonicMs()
            const inWindow = target >= measuredFrom
            for (const m of written) tracker.committed(m.id, at, inWindow && relay)
            if (inWindow) {
              measured += written.length
              last = Math.max(last, at)
            }
          }
        })
      yield* Effect.forEach(Array.from({ length: opts.producers }, (_, i) => i), producer, {
        concurrency: "unbounded",
        discard: true
      }).pipe(
        Effect.provideService(OutboxStore, stores.outbox),
        Effect.orDie
      )
      const achievedRate = Math.round(measured / Math.max(0.001, (last - measuredFrom) / 1000))
      if (relay && !(yield* waitFor(() => tracker.outstanding === 0, 30_000))) {
        log(`  ! e2e paced ${rate}/s: ${tracker.outstanding} not confirmed`)
      }
      const s = sorted(tracker.latencies)
      return {
        rate,
        achievedRate,
        p50Ms: round(percentile(s, 50)),
        p99Ms: round(percentile(s, 99)),
        lost: relay ? tracker.outstanding : 0
      }
    }).pipe(Effect.provideContext(context))
  }))
