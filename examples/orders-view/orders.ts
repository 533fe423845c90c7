/**
 * The order domain of the example: the write side (an `orders` table and its events, appended in the
 * same transaction) and the read side (the `order_list` view, maintained by a projection).
 */
import { Event, type Message, Outbox, type OutboxStore, Projection } from "@tidings/core"
import { type Duration, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

// Every event carries the order's version after the change: the projection's per-aggregate order.
export const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({
    orderId: Schema.String,
    version: Schema.Int,
    customer: Schema.String,
    totalCents: Schema.Int,
    items: Schema.Int
  })
})
export const OrderPaid = Event.define("order.paid", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, version: Schema.Int })
})
export const OrderShipped = Event.define("order.shipped", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, version: Schema.Int, carrier: Schema.String })
})
export const OrderCancelled = Event.define("order.cancelled", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, version: Schema.Int, reason: Schema.String })
})

const orderEvents: ReadonlySet<string> = new Set([
  OrderPlaced.type,
  OrderPaid.type,
  OrderShipped.type,
  OrderCancelled.type
])

export const createTables = SqlClient.SqlClient.use((sql) =>
  Effect.gen(function*() {
    yield* sql`CREATE SCHEMA IF NOT EXISTS orders_view`
    yield* sql`CREATE TABLE IF NOT EXISTS orders_view.orders (
      id text PRIMARY KEY, customer text NOT NULL, total_cents int NOT NULL, status text NOT NULL, version int NOT NULL)`
    yield* sql`CREATE TABLE IF NOT EXISTS orders_view.order_list (
      order_id text PRIMARY KEY, customer text NOT NULL, total_cents int NOT NULL, items int NOT NULL,
      status text NOT NULL, carrier text, note text, updated_at timestamptz NOT NULL)`
  })
)

// ——— write side ———

/** Places an order; returns the event it wrote (for read-your-writes). */
export const placeOrder = (orderId: string, customer: string, totalCents: number, items: number) =>
  SqlClient.SqlClient.use((sql) =>
    sql.withTransaction(Effect.gen(function*() {
      yield* sql`INSERT INTO orders_view.orders (id, customer, total_cents, status, version) VALUES (${orderId}, ${customer}, ${totalCents}, 'placed', 1)`
      return yield* Outbox.append(OrderPlaced, {
        aggregateId: orderId,
        payload: { orderId, version: 1, customer, totalCents, items }
      })
    }))
  )

/** Changes an order's status; the version comes from the row, locked, so events of one order are numbered in order. */
const transition = (
  orderId: string,
  status: string,
  event: (version: number) => Effect.Effect<Message.Message, Outbox.AppendError, OutboxStore.OutboxStore>
) =>
  SqlClient.SqlClient.use((sql) =>
    sql.withTransaction(Effect.gen(function*() {
      const [row] = yield* sql<
        { version: number }
      >`UPDATE orders_view.orders SET status = ${status}, version = version + 1 WHERE id = ${orderId} RETURNING version`
      if (row === undefined) return yield* Effect.die(new Error(`no order ${orderId}`))
      return yield* event(row.version)
    }))
  )

export const payOrder = (orderId: string) =>
  transition(
    orderId,
    "paid",
    (version) => Outbox.append(OrderPaid, { aggregateId: orderId, payload: { orderId, version } })
  )
export const shipOrder = (orderId: string, carrier: string) =>
  transition(
    orderId,
    "shipped",
    (version) => Outbox.append(OrderShipped, { aggregateId: orderId, payload: { orderId, version, carrier } })
  )
export const cancelOrder = (orderId: string, reason: string) =>
  transition(
    orderId,
    "cancelled",
    (version) => Outbox.append(OrderCancelled, { aggregateId: orderId, payload: { orderId, version, reason } })
  )

// ——— read side ———

interface Versioned {
  readonly orderId: string
  readonly version: number
}

/** The order list: one row per order, upserted per event, in order per order, exactly once. */
export const orderList = Projection.make({
  name: "order-list",
  table: "orders_view.order_list",
  position: (m: Message.Message) => {
    const p = m.payload as Versioned
    return { aggregateId: p.orderId, version: p.version }
  },
  apply: (m: Message.Message, target) =>
    SqlClient.SqlClient.use((sql) => {
      const table = sql(target.table)
      const p = m.payload as Record<string, unknown>
      switch (m.type) {
        case OrderPlaced.type:
          return sql`INSERT INTO ${table} (order_id, customer, total_cents, items, status, updated_at)
            VALUES (${String(p["orderId"])}, ${String(p["customer"])}, ${Number(p["totalCents"])}, ${
            Number(p["items"])
          }, 'placed', ${m.occurredAt})`
        case OrderPaid.type:
          return sql`UPDATE ${table} SET status = 'paid', updated_at = ${m.occurredAt} WHERE order_id = ${
            String(p["orderId"])
          }`
        case OrderShipped.type:
          return sql`UPDATE ${table} SET status = 'shipped', carrier = ${
            String(p["carrier"])
          }, updated_at = ${m.occurredAt} WHERE order_id = ${String(p["orderId"])}`
        default:
          return sql`UPDATE ${table} SET status = 'cancelled', note = ${
            String(p["reason"])
          }, updated_at = ${m.occurredAt} WHERE order_id = ${String(p["orderId"])}`
      }
    }).pipe(Effect.asVoid)
})

/** Outbox messages the projection reads (for the consumer and the rebuild). */
export const isOrderEvent = (m: Message.Message): boolean => orderEvents.has(m.type)

export interface OrderRow {
  readonly order_id: string
  readonly customer: string
  readonly total_cents: number
  readonly items: number
  readonly status: string
  readonly carrier: string | null
  readonly note: string | null
}

/**
 * The query: a customer's orders. With `after`, it first waits (at most `timeout`) until the
 * projection has applied that event: read-your-writes for the caller who just wrote it.
 */
export const listOrders = (
  customer: string,
  options: { readonly after?: Message.Message; readonly timeout?: Duration.Input } = {}
) =>
  Effect.gen(function*() {
    if (options.after !== undefined) {
      yield* Projection.awaitApplied(orderList, options.after.id, options.timeout ?? "5 seconds")
    }
    const sql = yield* SqlClient.SqlClient
    return yield* sql<
      OrderRow
    >`SELECT order_id, customer, total_cents, items, status, carrier, note FROM orders_view.order_list
      WHERE customer = ${customer} ORDER BY order_id`
  })
