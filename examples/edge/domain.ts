/**
 * The edge example's business: orders written with their `order.placed` event in one transaction.
 * Plain Effect code on `SqlClient` and the outbox, the same on a Worker as on a server.
 */
import * as Event from "@tidings/core/Event"
import * as Outbox from "@tidings/core/Outbox"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

/** The event every placed order publishes. */
export const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, customer: Schema.String, totalCents: Schema.Int })
})

const Id = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(64), Schema.isPattern(/^[\w.-]+$/))

/** `POST /orders` body; `orderId` makes the request idempotent (a retry answers 200 with the same order). */
export const OrderRequest = Schema.Struct({
  orderId: Schema.optional(Id),
  customer: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(64)),
  totalCents: Schema.Int.check(Schema.isGreaterThan(0), Schema.isLessThanOrEqualTo(10_000_000))
})
export type OrderRequest = typeof OrderRequest.Type

/** An order row, with the outbox status of its event (`pending` until a relay pass published it). */
export interface Order {
  readonly id: string
  readonly customer: string
  readonly total_cents: number
  readonly created_at: Date
  readonly event_id: string | null
  readonly event_status: string | null
}

/** The example's table (Tidings' own tables come from `Migrator.run`). Run at deploy time, not per request. */
export const createTables = (schema: string) =>
  SqlClient.SqlClient.use((sql) =>
    sql`CREATE TABLE IF NOT EXISTS ${sql(`${schema}.edge_orders`)} (
      id text PRIMARY KEY,
      customer text NOT NULL,
      total_cents integer NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )`
  )

/**
 * Writes the order and appends its event in one transaction: both commit, or neither does. An
 * order id that exists already writes nothing and returns the stored order (`created: false`).
 */
export const placeOrder = (schema: string, request: OrderRequest) =>
  Outbox.transaction(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const id = request.orderId ?? crypto.randomUUID()
    const inserted = yield* sql<{ id: string }>`
      INSERT INTO ${sql(`${schema}.edge_orders`)} (id, customer, total_cents)
      VALUES (${id}, ${request.customer}, ${request.totalCents})
      ON CONFLICT (id) DO NOTHING RETURNING id`
    if (inserted.length === 0) return { orderId: id, created: false, eventId: undefined }
    const event = yield* Outbox.append(OrderPlaced, {
      aggregateId: id,
      payload: { orderId: id, customer: request.customer, totalCents: request.totalCents }
    })
    return { orderId: id, created: true, eventId: event.id }
  }))

/** One order and its event's status; `undefined` when there is no such order. */
export const getOrder = (schema: string, id: string) =>
  SqlClient.SqlClient.use((sql) =>
    sql<Order>`
      SELECT o.id, o.customer, o.total_cents, o.created_at, e.id::text AS event_id, e.status AS event_status
      FROM ${sql(`${schema}.edge_orders`)} o
      LEFT JOIN ${
      sql(`${schema}.outbox`)
    } e ON e.aggregate_type = 'order' AND e.aggregate_id = o.id AND e.event_type = 'order.placed'
      WHERE o.id = ${id}`
  ).pipe(Effect.map((rows) => rows[0]))
