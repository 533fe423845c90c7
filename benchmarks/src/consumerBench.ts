/**
 * Consumers side by side, each handler writing one row per event in the database:
 * - `log`: `PgLogConsumer` (PostgreSQL as the transport) reads a log holding the backlog; its
 *   handlers and its cursor commit in one transaction per batch;
 * - `inbox`: `AmqpConsumer` with `Inbox.wrap` over `PgInboxStore`: the backlog waits in a RabbitMQ
 *   classic queue (published beforehand with confirms); each delivery's handler and inbox row commit
 *   in one transaction, then it is acked.
 * Events handled per second from starting the consumer until every row is committed; each run then
 * checks that every event left exactly one row.
 * @module
 */
import * as Inbox from "@tidings/core/Inbox"
import { InboxStore } from "@tidings/core/InboxStore"
import type { Message } from "@tidings/core/Message"
import { OutboxStore } from "@tidings/core/OutboxStore"
import * as PgInboxStore from "@tidings/postgres/PgInboxStore"
import * as PgLogConsumer from "@tidings/postgres/PgLogConsumer"
import * as PgLogStore from "@tidings/postgres/PgLogStore"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as AmqpConnection from "@tidings/rabbitmq/AmqpConnection"
import * as AmqpConsumer from "@tidings/rabbitmq/AmqpConsumer"
import * as EventRegistry from "@tidings/rabbitmq/EventRegistry"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { waitFor } from "./latency.ts"
import * as Pg from "./lib/postgres.ts"
import * as Rabbit from "./lib/rabbit.ts"
import { log } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { round } from "./lib/stats.ts"
import { partitions } from "./logMode.ts"

/** One consumer run. */
export interface ConsumerRun {
  readonly events: number
  readonly seconds: number
  readonly eventsPerSecond: number
  /** Events without their row, or with more than one. */
  readonly lost: number
  readonly duplicates: number
}

const handledTable = (schema: string) =>
  SqlClient.SqlClient.use((sql) =>
    sql`CREATE TABLE ${sql(`${schema}.handled`)} (id text NOT NULL, at timestamptz NOT NULL DEFAULT now())`
  ).pipe(Effect.orDie)

const check = (schema: string, events: number, seconds: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [r] = yield* sql<
      { rows: number; ids: number }
    >`SELECT count(*)::int AS rows, count(DISTINCT id)::int AS ids FROM ${sql(`${schema}.handled`)}`.pipe(Effect.orDie)
    const rows = Number(r?.rows ?? 0)
    const ids = Number(r?.ids ?? 0)
    return {
      events: ids,
      seconds: round(seconds, 3),
      eventsPerSecond: Math.round(ids / seconds),
      lost: events - ids,
      duplicates: rows - ids
    } satisfies ConsumerRun
  })

/** `PgLogConsumer` (its defaults: 2 workers, 100 events per transaction) drains a log of `msgs`. */
export const logRun = (url: string, msgs: ReadonlyArray<Message>): Effect.Effect<ConsumerRun> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, 6)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("logcons")
      const stores = yield* PgLogStore.make({ schema, partitions }).pipe(Effect.orDie)
      for (let i = 0; i < msgs.length; i += 1_000) {
        yield* stores.outbox.withTransaction(stores.outbox.append(msgs.slice(i, i + 1_000))).pipe(Effect.orDie)
      }
      yield* handledTable(schema)
      let committed = 0
      const start = performance.now()
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(PgLogConsumer.layer({
          schema,
          group: "bench",
          statsInterval: false,
          handler: (d) =>
            Effect.gen(function*() {
              const sql = yield* SqlClient.SqlClient
              yield* sql`INSERT INTO ${sql(`${schema}.handled`)} (id) VALUES (${d.id})`
              yield* sql.afterCommit(Effect.sync(() => void committed++))
            }).pipe(Effect.orDie)
        } as PgLogConsumer.Options<never, SqlClient.SqlClient>)).pipe(Effect.orDie)
        if (!(yield* waitFor(() => committed >= msgs.length, 120_000))) {
          log(`  ! log consumer: ${committed} of ${msgs.length} handled`)
        }
      }))
      return yield* check(schema, msgs.length, (performance.now() - start) / 1000)
    }).pipe(Effect.provideContext(context))
  }))

const registry = EventRegistry.make([Seed.OrderPlaced])

/**
 * `AmqpConsumer` (`concurrency` handlers, prefetch `prefetch`) with `Inbox.wrap` over
 * `PgInboxStore` drains a classic queue holding `msgs`.
 */
export const inboxRun = (
  url: string,
  rabbitUrl: string,
  msgs: ReadonlyArray<Message>,
  concurrency: number,
  prefetch: number
): Effect.Effect<ConsumerRun> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, concurrency + 2)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("inboxcons")
      yield* handledTable(schema)
      const queue = yield* Rabbit.freshQueue(rabbitUrl, "inbox", "classic")
      const exchange = Rabbit.exchangeOf(queue)
      const channel = yield* Effect.flatMap(Rabbit.rawConnection(rabbitUrl), (m) =>
        Effect.promise(() => m.createConfirmChannel()))
      channel.on("error", () =>
        undefined)
      yield* Effect.promise(async () => {
        for (const m of msgs) {
          const o = Rabbit.outgoing(m, exchange)
          if (!channel.publish(o.exchange, o.routingKey, o.content, o.options)) {
            await new Promise((r) => channel.once("drain", r))
          }
        }
        await channel.waitForConfirms()
      })
      const inbox = yield* PgInboxStore.make({ schema }).pipe(Effect.orDie)
      const outbox = yield* PgOutboxStore.make({ schema }).pipe(Effect.orDie)
      const connection = yield* Rabbit.connection(rabbitUrl, "bench-inbox")
      let committed = 0
      const handler = Inbox.wrap("bench", (d: AmqpConsumer.Delivery<EventRegistry.Decoded>) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* sql`INSERT INTO ${sql(`${schema}.handled`)} (id) VALUES (${d.messageId ?? ""})`
          yield* sql.afterCommit(Effect.sync(() => void committed++))
        }).pipe(Effect.orDie))
      const start = performance.now()
      yield* Effect.scoped(Effect.gen(function*() {
        yield* AmqpConsumer.make({ name: "bench-inbox", queue, registry, concurrency, prefetch, handler }).pipe(
          Effect.provideService(AmqpConnection.AmqpConnection, connection),
          Effect.provideService(InboxStore, inbox),
          Effect.provideService(OutboxStore, outbox),
          Effect.orDie
        )
        if (!(yield* waitFor(() => committed >= msgs.length, 120_000))) {
          log(`  ! inbox consumer: ${committed} of ${msgs.length} handled`)
        }
      }))
      return yield* check(schema, msgs.length, (performance.now() - start) / 1000)
    }).pipe(Effect.provideContext(context))
  }))
