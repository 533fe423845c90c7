/**
 * Log mode in the benchmarks: a fresh log (`PgLogStore`, migration 0006) seeded with the same
 * messages as the outbox runs, drained by `LogRelay.layer` into the in-memory broker. Every run is
 * checked: the group's cursors passed every event (lag 0), and the publisher saw each id once.
 * @module
 */
import * as LogRelay from "@tidings/core/LogRelay"
import * as LogStore from "@tidings/core/LogStore"
import type { Message } from "@tidings/core/Message"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import type * as PublisherPort from "@tidings/core/Publisher"
import * as Wakeup from "@tidings/core/Wakeup"
import * as PgLogStore from "@tidings/postgres/PgLogStore"
import { Effect, Layer, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Pg from "./lib/postgres.ts"
import { counting, memoryPublisher, Tally } from "./lib/publishers.ts"
import { log } from "./lib/report.ts"
import { round } from "./lib/stats.ts"

/** Partitions of the benchmark's logs (the store's default). */
export const partitions = 16

/** A fresh schema whose log holds `msgs` (appended through the outbox face, 1,000 per transaction), analyzed. */
export const prepare = (msgs: ReadonlyArray<Message>, options: Omit<PgLogStore.Options, "schema"> = {}) =>
  Effect.gen(function*() {
    const schema = yield* Pg.freshSchema("log")
    const stores = yield* PgLogStore.make({ schema, partitions, ...options }).pipe(Effect.orDie)
    yield* Pg.checkpoint
    for (let i = 0; i < msgs.length; i += 1_000) {
      yield* stores.outbox.withTransaction(stores.outbox.append(msgs.slice(i, i + 1_000))).pipe(Effect.orDie)
    }
    yield* SqlClient.SqlClient.use((sql) => sql`ANALYZE ${sql(`${schema}.log`)}`).pipe(Effect.orDie)
    return { schema, stores }
  })

/** What a drain returns (the claim benchmark's run shape). */
export interface Drained {
  readonly eventsPerSecond: number
  readonly events: number
  readonly seconds: number
  readonly duplicates: number
  readonly capped: boolean
  readonly lost?: number
}

/** The group's events not yet passed, over every partition. */
export const lag = (store: LogStore.Service, group: string) =>
  Effect.map(store.groups, (gs) => gs.find((g) => g.group === group)?.lag ?? -1).pipe(Effect.orDie)

/**
 * Drains `events` log events with one `LogRelay.layer` (`relays` workers, `batch` events per
 * partition and read) publishing to `publisher` (counted into `tally`); the clock runs from building
 * the layer until the last event was published.
 */
export const drain = (
  stores: PgLogStore.Stores,
  config: LogRelay.Config,
  events: number,
  capSeconds: number,
  publisher?: PublisherPort.Service
): Effect.Effect<Drained, never, Scope.Scope> =>
  Effect.gen(function*() {
    const tally = new Tally()
    const counted = counting(publisher ?? (yield* memoryPublisher), tally)
    const group = config.group ?? "bench"
    const start = performance.now()
    const deadline = start + capSeconds * 1000
    yield* Effect.scoped(Effect.gen(function*() {
      yield* Layer.build(
        LogRelay.layer({ statsInterval: false, retention: false, ...config, group }).pipe(
          Layer.provide(Layer.mergeAll(
            Layer.succeed(LogStore.LogStore)(stores.log),
            Layer.succeed(OutboxStore)(stores.outbox),
            Layer.succeed(Publisher)(counted),
            Layer.succeed(Wakeup.Wakeups)(Wakeup.makeHub())
          ))
        )
      ).pipe(Effect.orDie)
      while (tally.total < events && performance.now() < deadline) yield* Effect.sleep("1 millis")
    }))
    const seconds = (performance.now() - start) / 1000
    const done = Math.min(tally.total, events)
    const capped = done < events
    const left = yield* lag(stores.log, group)
    const ok = capped ? left >= 0 : left === 0
    if (!ok) {
      log(`  ! log: ${done} events published but the group's lag is ${left}`)
      process.exitCode = 1
    }
    return {
      eventsPerSecond: Math.round(done / seconds),
      events: done,
      seconds: round(seconds, 3),
      duplicates: tally.duplicates,
      capped,
      ...(ok ? {} : { lost: left })
    }
  })

/** One claim-phase run: its own pool (`relays` + 2 connections), a fresh log, one drain. */
export const measure = (
  url: string,
  plan: { readonly relays: number; readonly batch: number },
  msgs: ReadonlyArray<Message>,
  capSeconds: number
) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, plan.relays + 3)
    return yield* Effect.gen(function*() {
      const { stores } = yield* prepare(msgs)
      return yield* drain(stores, { concurrency: plan.relays, batchSize: plan.batch }, msgs.length, capSeconds)
    }).pipe(Effect.provideContext(context))
  }))
