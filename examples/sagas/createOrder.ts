/**
 * The create-order saga — reserve inventory, charge the payment, confirm the order — twice:
 *
 * - `CreateOrder`: synchronous (`Saga.run`), every step an Effect in this service, against its own
 *   Postgres tables and a (fake) payment gateway;
 * - `CreateOrderAsync`: asynchronous (`Saga.start`), every step a command event for another service,
 *   which answers with a reply event; commands and replies travel through the outbox.
 *
 * Every compensation is idempotent: it may run more than once (see README.md).
 */
import { Event, Saga } from "@tidings/core"
import { Effect, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"

export const OrderInput = Schema.Struct({
  orderId: Schema.String,
  sku: Schema.String,
  quantity: Schema.Int.check(Schema.isGreaterThan(0)),
  cents: Schema.Int.check(Schema.isGreaterThan(0))
})
export type OrderInput = typeof OrderInput.Type

/** The shop's tables, in the `shop` schema next to Tidings' own (`Migrator.run({ schema: "shop" })`). */
export const createTables = SqlClient.SqlClient.use((sql) =>
  Effect.all([
    sql`CREATE TABLE IF NOT EXISTS shop.stock (sku text PRIMARY KEY, available int NOT NULL CHECK (available >= 0))`,
    sql`CREATE TABLE IF NOT EXISTS shop.reservations (id text PRIMARY KEY, sku text NOT NULL, quantity int NOT NULL, released boolean NOT NULL DEFAULT false)`,
    sql`CREATE TABLE IF NOT EXISTS shop.payments (id text PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL, refunded boolean NOT NULL DEFAULT false)`,
    sql`CREATE TABLE IF NOT EXISTS shop.orders (id text PRIMARY KEY, payment_id text NOT NULL, confirmed_at timestamptz NOT NULL DEFAULT now())`
  ], { discard: true })
)

export class OutOfStock extends Schema.TaggedError<OutOfStock>()("OutOfStock", { sku: Schema.String }) {
  get isRetryable(): boolean {
    return false
  }
}
export class PaymentDeclined
  extends Schema.TaggedError<PaymentDeclined>()("PaymentDeclined", { reason: Schema.String })
{
  get isRetryable(): boolean {
    return false
  }
}

// ---- the services the steps call ----------------------------------------------------------

/** Takes stock for a reservation; the reservation id is the saga's idempotency key, so a retry reserves once. */
const reserve = (reservationId: string, sku: string, quantity: number) =>
  SqlClient.SqlClient.use((sql) =>
    sql.withTransaction(Effect.gen(function*() {
      const existing = yield* sql`SELECT 1 FROM shop.reservations WHERE id = ${reservationId}`
      if (existing.length > 0) return
      const taken =
        yield* sql`UPDATE shop.stock SET available = available - ${quantity} WHERE sku = ${sku} AND available >= ${quantity} RETURNING sku`
      if (taken.length === 0) return yield* new OutOfStock({ sku })
      yield* sql`INSERT INTO shop.reservations (id, sku, quantity) VALUES (${reservationId}, ${sku}, ${quantity})`
    }))
  )

/** Gives the stock back. Idempotent: only an unreleased reservation puts stock back, once. */
const release = (reservationId: string) =>
  SqlClient.SqlClient.use((sql) =>
    sql`WITH r AS (UPDATE shop.reservations SET released = true WHERE id = ${reservationId} AND NOT released RETURNING sku, quantity)
      UPDATE shop.stock s SET available = s.available + r.quantity FROM r WHERE s.sku = r.sku`.pipe(Effect.asVoid)
  )

/** A fake payment gateway: declines above 500.00, is slow for the amount 666.66, records the charge otherwise. */
const charge = (paymentId: string, orderId: string, cents: number) =>
  Effect.gen(function*() {
    if (cents === 66_666) yield* Effect.sleep("10 seconds")
    if (cents > 50_000) return yield* new PaymentDeclined({ reason: "amount over the card's limit" })
    yield* SqlClient.SqlClient.use((sql) =>
      sql`INSERT INTO shop.payments (id, order_id, cents) VALUES (${paymentId}, ${orderId}, ${cents}) ON CONFLICT DO NOTHING`
    )
  })

/** Refunds. Idempotent: refunding twice changes nothing. */
const refund = (paymentId: string) =>
  SqlClient.SqlClient.use((sql) =>
    sql`UPDATE shop.payments SET refunded = true WHERE id = ${paymentId}`.pipe(Effect.asVoid)
  )

// ---- the synchronous saga -------------------------------------------------------------------

export const CreateOrder = Saga.make("create-order", { input: OrderInput })
  .step("reserve-inventory", {
    result: Schema.Struct({ reservationId: Schema.String }),
    action: (ctx) =>
      reserve(ctx.idempotencyKey, ctx.input.sku, ctx.input.quantity).pipe(
        Effect.as({ reservationId: ctx.idempotencyKey })
      ),
    compensate: (_ctx, { reservationId }) => release(reservationId)
  })
  .step("charge-payment", {
    result: Schema.Struct({ paymentId: Schema.String }),
    // results of earlier steps are typed: ctx.results["reserve-inventory"].reservationId
    action: (ctx) =>
      charge(ctx.idempotencyKey, ctx.input.orderId, ctx.input.cents).pipe(Effect.as({ paymentId: ctx.idempotencyKey })),
    compensate: (_ctx, { paymentId }) => refund(paymentId),
    timeout: "500 millis",
    retry: Schedule.exponential("100 millis").pipe(Schedule.upTo({ times: 1 })),
    compensation: { timeout: "5 seconds", retry: Schedule.exponential("200 millis").pipe(Schedule.upTo({ times: 5 })) }
  })
  .step("confirm-order", {
    action: (ctx) =>
      SqlClient.SqlClient.use((sql) =>
        sql`INSERT INTO shop.orders (id, payment_id) VALUES (${ctx.input.orderId}, ${
          ctx.results["charge-payment"].paymentId
        }) ON CONFLICT DO NOTHING`
      )
  })

// ---- the asynchronous saga: the same steps as commands to other services ---------------------

export const ReserveInventory = Event.define("inventory.reserve", {
  aggregateType: "order",
  schema: Schema.Struct({ reservationId: Schema.String, sku: Schema.String, quantity: Schema.Int })
})
export const ReleaseInventory = Event.define("inventory.release", {
  aggregateType: "order",
  schema: Schema.Struct({ reservationId: Schema.String })
})
export const ChargePayment = Event.define("payment.charge", {
  aggregateType: "order",
  schema: Schema.Struct({ paymentId: Schema.String, orderId: Schema.String, cents: Schema.Int })
})
export const RefundPayment = Event.define("payment.refund", {
  aggregateType: "order",
  schema: Schema.Struct({ paymentId: Schema.String })
})
export const ConfirmOrder = Event.define("order.confirm", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, paymentId: Schema.String })
})

export const CreateOrderAsync = Saga.make("create-order-async", { input: OrderInput })
  .command("reserve-inventory", {
    result: Schema.Struct({ reservationId: Schema.String }),
    send: (ctx) =>
      ReserveInventory.make({
        aggregateId: ctx.input.orderId,
        payload: { reservationId: ctx.idempotencyKey, sku: ctx.input.sku, quantity: ctx.input.quantity }
      }),
    compensate: (ctx, { reservationId }) =>
      ReleaseInventory.make({ aggregateId: ctx.input.orderId, payload: { reservationId } }),
    timeout: "30 seconds"
  })
  .command("charge-payment", {
    result: Schema.Struct({ paymentId: Schema.String }),
    send: (ctx) =>
      ChargePayment.make({
        aggregateId: ctx.input.orderId,
        payload: { paymentId: ctx.idempotencyKey, orderId: ctx.input.orderId, cents: ctx.input.cents }
      }),
    compensate: (ctx, { paymentId }) => RefundPayment.make({ aggregateId: ctx.input.orderId, payload: { paymentId } }),
    timeout: "30 seconds"
  })
  .command("confirm-order", {
    send: (ctx) =>
      ConfirmOrder.make({
        aggregateId: ctx.input.orderId,
        payload: { orderId: ctx.input.orderId, paymentId: ctx.results["charge-payment"].paymentId }
      })
  })

/**
 * The other services, as one command handler: each does its work and appends its reply in one
 * transaction, so that the reply is sent exactly when the work commits.
 */
export const participant = (command: Saga.Command) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const p = command.message.payload as Record<string, any>
    const work: Effect.Effect<Saga.Outcome, unknown, SqlClient.SqlClient> = (() => {
      switch (command.message.type) {
        case ReserveInventory.type:
          return reserve(p["reservationId"], p["sku"], p["quantity"]).pipe(
            Effect.as(Saga.completed({ reservationId: p["reservationId"] })),
            Effect.catchTag("OutOfStock", (e) => Effect.succeed(Saga.failed(`out of stock: ${e.sku}`)))
          )
        case ReleaseInventory.type:
          return Effect.as(release(p["reservationId"]), Saga.completed())
        case ChargePayment.type:
          return charge(p["paymentId"], p["orderId"], p["cents"]).pipe(
            Effect.as(Saga.completed({ paymentId: p["paymentId"] })),
            Effect.catchTag("PaymentDeclined", (e) => Effect.succeed(Saga.failed(`payment declined: ${e.reason}`)))
          )
        case RefundPayment.type:
          return Effect.as(refund(p["paymentId"]), Saga.completed())
        case ConfirmOrder.type:
          return sql`INSERT INTO shop.orders (id, payment_id) VALUES (${p["orderId"]}, ${
            p["paymentId"]
          }) ON CONFLICT DO NOTHING`.pipe(Effect.as(Saga.completed()))
        default:
          return Effect.succeed(Saga.failed(`no handler for ${command.message.type}`))
      }
    })()
    yield* sql.withTransaction(Effect.flatMap(work, (outcome) => Saga.reply(command, outcome)))
  })
