/**
 * The orders service's domain, written once for every transport:
 *
 * - the write side: `placeOrder` inserts the order and starts the `place-order` saga in one
 *   transaction (the saga's first command and the `order.placed` event commit with the row);
 * - the saga: reserve inventory, then charge the payment, each a command answered by a reply; a
 *   failed step compensates the completed ones (the reservation is released);
 * - the participants: inventory and payment handlers, each doing its work and appending its reply
 *   in one transaction, exactly once per message through the inbox;
 * - the orchestrator: advances sagas with replies and, when a saga ends, confirms or cancels the
 *   order (`order.confirmed` / `order.cancelled`) in the same transaction;
 * - the read side: the `order_list` projection, fed by the order events, in order per order.
 *
 * Tables live in one schema (Tidings' own and the app's side by side), given to {@link make}.
 */
import { Event, Inbox, Outbox, Projection, Saga } from "@tidings/core"
import { Effect, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"

// ——— events and commands ———————————————————————————————————————————————————————————————————

/** Every order event carries the order's version after the change: the projection's order per order. */
export const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({
    orderId: Schema.String,
    version: Schema.Int,
    customer: Schema.String,
    sku: Schema.String,
    quantity: Schema.Int,
    amountCents: Schema.Int
  })
})
export const OrderConfirmed = Event.define("order.confirmed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, version: Schema.Int, paymentId: Schema.String })
})
export const OrderCancelled = Event.define("order.cancelled", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, version: Schema.Int, reason: Schema.String })
})

export const ReserveInventory = Event.define("inventory.reserve", {
  aggregateType: "order",
  schema: Schema.Struct({
    orderId: Schema.String,
    reservationId: Schema.String,
    sku: Schema.String,
    quantity: Schema.Int
  })
})
export const ReleaseInventory = Event.define("inventory.release", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, reservationId: Schema.String })
})
export const ChargePayment = Event.define("payment.charge", {
  aggregateType: "order",
  schema: Schema.Struct({
    orderId: Schema.String,
    paymentId: Schema.String,
    customer: Schema.String,
    amountCents: Schema.Int
  })
})
export const RefundPayment = Event.define("payment.refund", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, paymentId: Schema.String })
})

/** The events each consumer queue is bound to. */
export const bindings = {
  inventory: [ReserveInventory, ReleaseInventory],
  payment: [ChargePayment, RefundPayment],
  orchestrator: [Saga.ReplyEvent],
  projection: [OrderPlaced, OrderConfirmed, OrderCancelled]
} as const

/** A message as the handlers read it, whatever the transport: its id, type, decoded payload, headers, delivery attempt. */
export interface Incoming extends Saga.Received {
  readonly id: string
  readonly attempt: number
}

// ——— input ————————————————————————————————————————————————————————————————————————————————

const Name = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(64), Schema.isPattern(/^[\w.-]+$/))

/** The body of `POST /orders`. `orderId` is optional: a client that sends one can retry the request safely. */
export const OrderRequest = Schema.Struct({
  orderId: Schema.optionalKey(Name),
  customer: Name,
  sku: Name,
  quantity: Schema.Int.check(Schema.isGreaterThan(0), Schema.isLessThanOrEqualTo(1000)),
  amountCents: Schema.Int.check(Schema.isGreaterThan(0), Schema.isLessThanOrEqualTo(100_000_000))
})
export type OrderRequest = typeof OrderRequest.Type

/** The saga's input. */
export const OrderInput = Schema.Struct({
  orderId: Schema.String,
  customer: Schema.String,
  sku: Schema.String,
  quantity: Schema.Int,
  amountCents: Schema.Int
})
export type OrderInput = typeof OrderInput.Type

// ——— the saga ————————————————————————————————————————————————————————————————————————————

/**
 * `place-order`: reserve the stock, then charge the card. A failure (out of stock, a declined card,
 * no reply within 30 s) compensates what was done: the reservation is released.
 */
export const PlaceOrder = Saga.make("place-order", { input: OrderInput })
  .command("reserve-inventory", {
    result: Schema.Struct({ reservationId: Schema.String }),
    send: (ctx) =>
      ReserveInventory.make({
        aggregateId: ctx.input.orderId,
        payload: {
          orderId: ctx.input.orderId,
          reservationId: ctx.idempotencyKey,
          sku: ctx.input.sku,
          quantity: ctx.input.quantity
        }
      }),
    compensate: (ctx, { reservationId }) =>
      ReleaseInventory.make({ aggregateId: ctx.input.orderId, payload: { orderId: ctx.input.orderId, reservationId } }),
    timeout: "30 seconds",
    compensation: { timeout: "30 seconds" }
  })
  .command("charge-payment", {
    result: Schema.Struct({ paymentId: Schema.String }),
    send: (ctx) =>
      ChargePayment.make({
        aggregateId: ctx.input.orderId,
        payload: {
          orderId: ctx.input.orderId,
          paymentId: ctx.idempotencyKey,
          customer: ctx.input.customer,
          amountCents: ctx.input.amountCents
        }
      }),
    // The last step: it is compensated only if a step is added after it, but a refund must exist then.
    compensate: (ctx, { paymentId }) =>
      RefundPayment.make({ aggregateId: ctx.input.orderId, payload: { orderId: ctx.input.orderId, paymentId } }),
    timeout: "30 seconds"
  })

/** The definitions this service runs (for replies and recovery). */
export const sagas = Saga.registry(PlaceOrder)

// ——— errors ——————————————————————————————————————————————————————————————————————————————

/** The payment gateway did not answer: worth another delivery. */
export class GatewayUnavailable
  extends Schema.TaggedError<GatewayUnavailable>()("GatewayUnavailable", { paymentId: Schema.String })
{
  get isRetryable(): boolean {
    return true
  }
}

/** A message a handler can never process (a command for another service, a payload it cannot read). */
export class UnprocessableMessage extends Schema.TaggedError<UnprocessableMessage>()("UnprocessableMessage", {
  messageId: Schema.String,
  reason: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/** No order with this id. */
export class OrderNotFound extends Schema.TaggedError<OrderNotFound>()("OrderNotFound", { orderId: Schema.String }) {
  get httpStatus(): number {
    return 404
  }
}

/** An order id reused for a different order. */
export class OrderIdConflict
  extends Schema.TaggedError<OrderIdConflict>()("OrderIdConflict", { orderId: Schema.String })
{
  get httpStatus(): number {
    return 409
  }
}

// ——— rows ————————————————————————————————————————————————————————————————————————————————

/** An order as written (the write side). */
export interface OrderRow {
  readonly id: string
  readonly customer: string
  readonly sku: string
  readonly quantity: number
  readonly amount_cents: number
  readonly status: "pending" | "confirmed" | "cancelled" | "failed"
  readonly reason: string | null
  readonly saga_id: string
  readonly version: number
}

/** A row of the order list (the read side). */
export interface OrderListRow {
  readonly order_id: string
  readonly customer: string
  readonly sku: string
  readonly quantity: number
  readonly amount_cents: number
  readonly status: string
  readonly reason: string | null
  readonly version: number
}

/** The stock the service starts with. */
export const initialStock: ReadonlyArray<{ readonly sku: string; readonly available: number }> = [
  { sku: "book", available: 100 },
  { sku: "mug", available: 50 },
  { sku: "lamp", available: 5 }
]

/** The payment gateway's rules (a fake, so the demo is deterministic). */
export const gateway = {
  /** Cards of this customer are declined: the saga compensates. */
  declinedCustomer: "mallory",
  /** Charges above this are declined (over the card's limit). */
  limitCents: 100_000,
  /** For this customer the gateway fails the first attempt: the consumer redelivers, the second succeeds. */
  flakyCustomer: "grace"
} as const

// ——— the service, bound to a schema ——————————————————————————————————————————————————————

/** Consumer names (also their inbox names and queue suffixes). */
export const consumers = {
  inventory: "inventory",
  payment: "payment",
  orchestrator: "orders-saga",
  projection: "order-list"
} as const

/** Builds the service's operations on the tables of `schema`. */
export const make = (schema: string) => {
  const table = (name: string) => `${schema}.${name}`

  const createTables = SqlClient.SqlClient.use((sql) =>
    Effect.gen(function*() {
      yield* sql`CREATE TABLE IF NOT EXISTS ${sql(table("orders"))} (
        id text PRIMARY KEY, customer text NOT NULL, sku text NOT NULL, quantity int NOT NULL, amount_cents int NOT NULL,
        status text NOT NULL, reason text, saga_id uuid NOT NULL, version int NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now())`
      yield* sql`CREATE TABLE IF NOT EXISTS ${
        sql(table("stock"))
      } (sku text PRIMARY KEY, available int NOT NULL CHECK (available >= 0))`
      yield* sql`CREATE TABLE IF NOT EXISTS ${sql(table("reservations"))} (
        id text PRIMARY KEY, order_id text NOT NULL, sku text NOT NULL, quantity int NOT NULL, released boolean NOT NULL DEFAULT false)`
      yield* sql`CREATE TABLE IF NOT EXISTS ${sql(table("payments"))} (
        id text PRIMARY KEY, order_id text NOT NULL, customer text NOT NULL, amount_cents int NOT NULL, refunded boolean NOT NULL DEFAULT false)`
      yield* sql`CREATE TABLE IF NOT EXISTS ${sql(table("order_list"))} (
        order_id text PRIMARY KEY, customer text NOT NULL, sku text NOT NULL, quantity int NOT NULL, amount_cents int NOT NULL,
        status text NOT NULL, reason text, version int NOT NULL, updated_at timestamptz NOT NULL)`
      // Restocked to at least the initial level at every start, so the demo can be run again and
      // again against the same database.
      for (const { sku, available } of initialStock) {
        yield* sql`INSERT INTO ${sql(table("stock"))} AS s (sku, available) VALUES (${sku}, ${available})
          ON CONFLICT (sku) DO UPDATE SET available = GREATEST(s.available, EXCLUDED.available)`
      }
    })
  )

  // ——— write side ———

  /**
   * Places an order: the row, the saga (with its first command) and `order.placed` commit in one
   * transaction. Placing the same `orderId` again returns the existing order (a safe client retry);
   * the same id with other details is an {@link OrderIdConflict}.
   */
  const placeOrder = (request: OrderRequest) =>
    SqlClient.SqlClient.use((sql) =>
      sql.withTransaction(Effect.gen(function*() {
        const orderId = request.orderId ?? `ord-${crypto.randomUUID()}`
        const input: OrderInput = {
          orderId,
          customer: request.customer,
          sku: request.sku,
          quantity: request.quantity,
          amountCents: request.amountCents
        }
        // Taken first, so a concurrent duplicate waits here and then sees the row.
        const inserted = yield* sql<{ id: string }>`INSERT INTO ${
          sql(table("orders"))
        } (id, customer, sku, quantity, amount_cents, status, saga_id, version)
          VALUES (${orderId}, ${input.customer}, ${input.sku}, ${input.quantity}, ${input.amountCents}, 'pending', ${crypto.randomUUID()}, 1)
          ON CONFLICT (id) DO NOTHING RETURNING id`
        if (inserted.length === 0) {
          const existing = yield* getOrder(orderId)
          const same = existing.customer === input.customer && existing.sku === input.sku &&
            existing.quantity === input.quantity &&
            existing.amount_cents === input.amountCents
          if (!same) return yield* new OrderIdConflict({ orderId })
          return { order: existing, created: false }
        }
        const sagaId = yield* Saga.start(PlaceOrder, input)
        yield* sql`UPDATE ${sql(table("orders"))} SET saga_id = ${sagaId} WHERE id = ${orderId}`
        yield* Outbox.append(OrderPlaced, { aggregateId: orderId, payload: { ...input, version: 1 } })
        return { order: yield* getOrder(orderId), created: true }
      }))
    )

  const getOrder = (orderId: string) =>
    SqlClient.SqlClient.use((sql) =>
      sql<OrderRow>`SELECT id, customer, sku, quantity, amount_cents, status, reason, saga_id::text AS saga_id, version
        FROM ${sql(table("orders"))} WHERE id = ${orderId}`
    ).pipe(
      Effect.flatMap((rows) =>
        rows[0] === undefined ? Effect.fail(new OrderNotFound({ orderId })) : Effect.succeed(rows[0])
      )
    )

  const stock = SqlClient.SqlClient.use((sql) =>
    sql<{ sku: string; available: number }>`SELECT sku, available FROM ${sql(table("stock"))} ORDER BY sku`
  )

  // ——— participants ———

  /** Reserves stock (idempotent per reservation id: a redelivered command reserves once). */
  const reserve = (p: typeof ReserveInventory.schema.Type) =>
    SqlClient.SqlClient.use((sql) =>
      Effect.gen(function*() {
        const existing = yield* sql`SELECT 1 FROM ${sql(table("reservations"))} WHERE id = ${p.reservationId}`
        if (existing.length > 0) return Saga.completed({ reservationId: p.reservationId })
        const taken = yield* sql`UPDATE ${sql(table("stock"))} SET available = available - ${p.quantity}
          WHERE sku = ${p.sku} AND available >= ${p.quantity} RETURNING sku`
        if (taken.length === 0) return Saga.failed(`out of stock: ${p.quantity} × ${p.sku}`)
        yield* sql`INSERT INTO ${
          sql(table("reservations"))
        } (id, order_id, sku, quantity) VALUES (${p.reservationId}, ${p.orderId}, ${p.sku}, ${p.quantity})`
        return Saga.completed({ reservationId: p.reservationId })
      })
    )

  /** Gives the stock back; only an unreleased reservation does, once. */
  const release = (p: typeof ReleaseInventory.schema.Type) =>
    SqlClient.SqlClient.use((sql) =>
      sql`WITH r AS (UPDATE ${
        sql(table("reservations"))
      } SET released = true WHERE id = ${p.reservationId} AND NOT released RETURNING sku, quantity)
        UPDATE ${sql(table("stock"))} s SET available = s.available + r.quantity FROM r WHERE s.sku = r.sku`
    ).pipe(Effect.as(Saga.completed()))

  /** Charges the card through the (fake) gateway; see {@link gateway} for its rules. */
  const charge = (p: typeof ChargePayment.schema.Type, attempt: number) =>
    Effect.gen(function*() {
      if (p.customer === gateway.flakyCustomer && attempt === 1) {
        return yield* new GatewayUnavailable({ paymentId: p.paymentId })
      }
      if (p.customer === gateway.declinedCustomer) return Saga.failed("payment declined: card refused by the issuer")
      if (p.amountCents > gateway.limitCents) return Saga.failed("payment declined: over the card's limit")
      yield* SqlClient.SqlClient.use((sql) =>
        sql`INSERT INTO ${
          sql(table("payments"))
        } (id, order_id, customer, amount_cents) VALUES (${p.paymentId}, ${p.orderId}, ${p.customer}, ${p.amountCents})
          ON CONFLICT (id) DO NOTHING`
      )
      return Saga.completed({ paymentId: p.paymentId })
    })

  const refund = (p: typeof RefundPayment.schema.Type) =>
    SqlClient.SqlClient.use((sql) =>
      sql`UPDATE ${sql(table("payments"))} SET refunded = true WHERE id = ${p.paymentId}`
    ).pipe(Effect.as(Saga.completed()))

  const decode = <S extends Schema.Codec<any, any, never, never>>(
    schema: S,
    m: Incoming
  ): Effect.Effect<S["Type"], UnprocessableMessage> =>
    Schema.decodeUnknownEffect(schema)(m.payload).pipe(
      Effect.mapError((e) => new UnprocessableMessage({ messageId: m.id, reason: e.message }))
    )

  /** Runs a participant's work and appends its reply in one transaction, once per message (the inbox). */
  const participate = <E, R>(
    consumer: string,
    m: Incoming,
    work: (command: Saga.Command<Incoming>) => Effect.Effect<Saga.Outcome, E, R>
  ) =>
    Effect.gen(function*() {
      const command = Saga.commandOf(m)
      if (Option.isNone(command)) {
        return yield* new UnprocessableMessage({ messageId: m.id, reason: `${m.type} carries no saga command headers` })
      }
      yield* Inbox.handle(
        consumer,
        m.id,
        Effect.flatMap(work(command.value), (outcome) => Saga.reply(command.value, outcome))
      )
    })

  /** The inventory service's consumer: reserve and release. */
  const inventoryHandler = (m: Incoming) =>
    participate(consumers.inventory, m, () => {
      switch (m.type) {
        case ReserveInventory.type:
          return Effect.flatMap(decode(ReserveInventory.schema, m), reserve)
        case ReleaseInventory.type:
          return Effect.flatMap(decode(ReleaseInventory.schema, m), release)
        default:
          return Effect.fail(
            new UnprocessableMessage({ messageId: m.id, reason: `inventory does not handle ${m.type}` })
          )
      }
    })

  /** The payment service's consumer: charge and refund. */
  const paymentHandler = (m: Incoming) =>
    participate(consumers.payment, m, () => {
      switch (m.type) {
        case ChargePayment.type:
          return Effect.flatMap(decode(ChargePayment.schema, m), (p) => charge(p, m.attempt))
        case RefundPayment.type:
          return Effect.flatMap(decode(RefundPayment.schema, m), refund)
        default:
          return Effect.fail(new UnprocessableMessage({ messageId: m.id, reason: `payment does not handle ${m.type}` }))
      }
    })

  // ——— orchestrator ———

  /**
   * Advances the saga with a reply; when the saga ends, confirms or cancels the order and appends its
   * event, all in the inbox's transaction (so the order and the saga never disagree).
   */
  const orchestratorHandler = (m: Incoming) =>
    Inbox.handle(
      consumers.orchestrator,
      m.id,
      Effect.gen(function*() {
        const outcome = yield* Saga.handleReply(sagas, m)
        if (outcome !== "completed" && outcome !== "compensated" && outcome !== "failed") return outcome
        const sagaId = (m.payload as { readonly sagaId: string }).sagaId
        const state = yield* Saga.get(sagaId)
        const orderId = (state.input as OrderInput).orderId
        const sql = yield* SqlClient.SqlClient
        const status = outcome === "completed" ? "confirmed" : outcome === "compensated" ? "cancelled" : "failed"
        const reason = outcome === "completed" ? null : state.error ?? outcome
        const [row] = yield* sql<{ version: number }>`UPDATE ${sql(table("orders"))}
          SET status = ${status}, reason = ${reason}, version = version + 1, updated_at = now()
          WHERE id = ${orderId} AND status = 'pending' RETURNING version`
        if (row === undefined) return outcome // already settled (cannot happen twice through the inbox; kept safe anyway)
        if (outcome === "completed") {
          const paymentId = (state.steps[1]?.result as { readonly paymentId?: string } | null)?.paymentId ?? ""
          yield* Outbox.append(OrderConfirmed, {
            aggregateId: orderId,
            payload: { orderId, version: row.version, paymentId }
          })
        } else {
          yield* Outbox.append(OrderCancelled, {
            aggregateId: orderId,
            payload: { orderId, version: row.version, reason: reason ?? outcome }
          })
        }
        return outcome
      })
    ).pipe(Effect.asVoid)

  // ——— read side ———

  /** The order list: one row per order, applied in order per order, exactly once. */
  const orderList = Projection.make({
    name: consumers.projection,
    table: table("order_list"),
    position: (m: Incoming) => {
      const p = m.payload as { readonly orderId: string; readonly version: number }
      return { aggregateId: p.orderId, version: p.version }
    },
    apply: (m: Incoming, target) =>
      SqlClient.SqlClient.use((sql) =>
        Effect.gen(function*() {
          const t = sql(target.table)
          switch (m.type) {
            case OrderPlaced.type: {
              const p = yield* decode(OrderPlaced.schema, m)
              return yield* sql`INSERT INTO ${t} (order_id, customer, sku, quantity, amount_cents, status, version, updated_at)
                VALUES (${p.orderId}, ${p.customer}, ${p.sku}, ${p.quantity}, ${p.amountCents}, 'pending', ${p.version}, now())`
            }
            case OrderConfirmed.type: {
              const p = yield* decode(OrderConfirmed.schema, m)
              return yield* sql`UPDATE ${t} SET status = 'confirmed', version = ${p.version}, updated_at = now() WHERE order_id = ${p.orderId}`
            }
            case OrderCancelled.type: {
              const p = yield* decode(OrderCancelled.schema, m)
              return yield* sql`UPDATE ${t} SET status = 'cancelled', reason = ${p.reason}, version = ${p.version}, updated_at = now() WHERE order_id = ${p.orderId}`
            }
            default:
              return yield* new UnprocessableMessage({
                messageId: m.id,
                reason: `the order list does not handle ${m.type}`
              })
          }
        })
      ).pipe(Effect.asVoid)
  })

  const projectionHandler = (m: Incoming) => Effect.asVoid(Projection.handle(orderList, m.id, m))

  /** The order list, optionally for one customer. */
  const listOrders = (customer?: string) =>
    SqlClient.SqlClient.use((sql) =>
      sql<OrderListRow>`SELECT order_id, customer, sku, quantity, amount_cents, status, reason, version FROM ${
        sql(table("order_list"))
      }
        ${customer === undefined ? sql`` : sql`WHERE customer = ${customer}`} ORDER BY order_id`
    )

  /** Outbox events by type and status (for the demo's summary). */
  const eventCounts = SqlClient.SqlClient.use((sql) =>
    sql<{ event_type: string; status: string; n: number }>`SELECT event_type, status, count(*)::int AS n FROM ${
      sql(table("outbox"))
    }
      GROUP BY event_type, status ORDER BY event_type, status`
  )

  return {
    schema,
    createTables,
    placeOrder,
    getOrder,
    stock,
    listOrders,
    eventCounts,
    orderList,
    handlers: {
      inventory: inventoryHandler,
      payment: paymentHandler,
      orchestrator: orchestratorHandler,
      projection: projectionHandler
    }
  }
}

/** The service's operations on one schema. */
export type Orders = ReturnType<typeof make>
