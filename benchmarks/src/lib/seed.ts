/**
 * The benchmark's event and the seeding of outbox tables.
 *
 * Pending rows are written by the real store (`OutboxStore.append`, 1,000 per transaction) from
 * messages encoded by `Outbox.encode`, so they are exactly the rows an application would write. The
 * messages are encoded once and reused: every run has a schema of its own, so ids never collide.
 * @module
 */
import * as Event from "@tidings/core/Event"
import type { Message } from "@tidings/core/Message"
import * as Outbox from "@tidings/core/Outbox"
import type * as OutboxStore from "@tidings/core/OutboxStore"
import { Duration, Effect, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"

/** A typical small domain event (~250 bytes of JSON). */
export const OrderPlaced = Event.define("bench.order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({
    orderId: Schema.String,
    customerId: Schema.String,
    totalCents: Schema.Int,
    currency: Schema.String,
    lines: Schema.Array(Schema.Struct({ sku: Schema.String, quantity: Schema.Int, priceCents: Schema.Int }))
  })
})

/**
 * Distinct aggregates (ordering keys) in seeded data: many keys with a few events each, the shape
 * a per-key relay has to deal with.
 */
export const aggregates = 1_000

/** The input of event `i` (aggregate `i mod aggregates`). */
export const input = (i: number): Event.EventInput<typeof OrderPlaced.schema.Type> => {
  const orderId = `order-${i % aggregates}`
  return {
    aggregateId: orderId,
    payload: {
      orderId,
      customerId: `customer-${i % 97}`,
      totalCents: 1_000 + (i % 9_000),
      currency: "EUR",
      lines: [
        { sku: `sku-${i % 31}`, quantity: 1 + (i % 3), priceCents: 500 + (i % 700) },
        { sku: `sku-${i % 17}`, quantity: 1, priceCents: 250 }
      ]
    }
  }
}

/** Encodes `count` events into outbox messages (validated, with UUIDv7 ids), once per process. */
export const messages = (count: number): Effect.Effect<ReadonlyArray<Message>> =>
  Effect.gen(function*() {
    const out: Array<Message> = []
    const now = Date.now()
    for (let i = 0; i < count; i++) out.push(yield* Outbox.encode(OrderPlaced.make(input(i)), now, Option.none()))
    return out
  }).pipe(Effect.orDie)

/** Inserts `msgs` as pending rows through the store, 1,000 per transaction. */
export const insertPending = (store: OutboxStore.Service, msgs: ReadonlyArray<Message>): Effect.Effect<void> =>
  Effect.gen(function*() {
    for (let i = 0; i < msgs.length; i += 1_000) {
      yield* store.withTransaction(store.append(msgs.slice(i, i + 1_000)))
    }
  }).pipe(Effect.orDie)

/**
 * Gives the table the history of a busy outbox: `count` older events, appended and then claimed and
 * settled as published by the store itself (so the rows are what the relay leaves behind), then
 * vacuumed as autovacuum would have done. They are inserted by set-based statements, with UUIDv7 ids
 * built in SQL from timestamps a day ago, so they sort before every pending row.
 */
export const insertHistory = (
  store: OutboxStore.Service,
  schema: string,
  count: number
): Effect.Effect<void, never, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const key = sql.literal(`'order-' || (g % ${aggregates})`)
    // In 4 slices at once: seeding is the slow part of a dirty run, and the server has cores to spare.
    const slices = 4
    const per = Math.ceil(count / slices)
    yield* Effect.forEach(Array.from({ length: slices }, (_, i) => i), (i) =>
      sql`INSERT INTO ${
        sql(`${schema}.outbox`)
      } (id, aggregate_type, aggregate_id, ordering_key, event_type, event_version,
          payload, occurred_at, available_at, created_at)
        SELECT
          -- UUIDv7: 48-bit ms timestamp, then version 7 (set_bit 52 and 53 turn the 4 into a 7), random rest
          encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send(
            (extract(epoch FROM t.at) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid,
          'order', ${key}, ${key}, ${OrderPlaced.type}, 1,
          jsonb_build_object('orderId', ${key}, 'customerId', 'customer-' || (g % 97), 'totalCents', 1000 + g % 9000, 'currency', 'EUR',
            'lines', jsonb_build_array(jsonb_build_object('sku', 'sku-' || (g % 31), 'quantity', 1 + g % 3, 'priceCents', 500 + g % 700),
                                       jsonb_build_object('sku', 'sku-' || (g % 17), 'quantity', 1, 'priceCents', 250))),
          t.at, t.at, t.at
        FROM generate_series(${i * per + 1}::int, ${Math.min(count, (i + 1) * per)}::int) AS g,
          LATERAL (SELECT now() - interval '1 day' + g * interval '1 millisecond' AS at) AS t`, {
      concurrency: slices,
      discard: true
    })
    const lease = Duration.minutes(5)
    yield* Effect.forEach(
      Array.from({ length: slices }, (_, i) =>
        `history-${i}`),
      (relayId) =>
        Effect.gen(function*() {
          while (true) {
            const claimed = yield* store.claim({ relayId, batchSize: 5_000, lease })
            if (claimed.length === 0) {
              return
            }
            yield* store.settle(relayId, {
              published: claimed.map((c) =>
                c.message.id
              ),
              retry: [],
              failed: []
            })
          }
        }),
      { concurrency: slices, discard: true }
    )
    yield* sql`VACUUM (ANALYZE) ${sql(`${schema}.outbox`)}`
  }).pipe(Effect.orDie)
