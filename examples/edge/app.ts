/**
 * The Worker's HTTP routes on a Tidings runtime (`@tidings/hono`):
 *
 * | route | what |
 * |---|---|
 * | `POST /orders` | `{ customer, totalCents, orderId? }`: the order row and its `order.placed` event in one transaction → 201 (200 when `orderId` exists) |
 * | `GET /orders/:id` | the order, with its event's outbox status (`pending` until a relay pass published it) |
 */
import type { OutboxStore } from "@tidings/core/OutboxStore"
import { HttpErrors, Input, type Runtime } from "@tidings/hono"
import { Effect, Schema } from "effect"
import type { SqlClient } from "effect/sql"
import { Hono } from "hono"
import * as Domain from "./domain.ts"

class OrderNotFound extends Schema.TaggedError<OrderNotFound>()("OrderNotFound", { message: Schema.String }) {}

const OrderId = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(64))

/** The routes on `rt`, a runtime with the Postgres client and outbox store. */
export const routes = (rt: Runtime.Runtime<SqlClient.SqlClient | OutboxStore>, schema: string) => {
  const app = new Hono()
  app.onError(HttpErrors.onError)
  app.notFound(HttpErrors.notFound)
  app.post(
    "/orders",
    rt.handler((c) =>
      Effect.gen(function*() {
        const request = yield* Input.json(c, Domain.OrderRequest)
        const placed = yield* Domain.placeOrder(schema, request)
        return c.json(placed, placed.created ? 201 : 200, { location: `/orders/${placed.orderId}` })
      })
    )
  )
  app.get(
    "/orders/:id",
    rt.handler((c) =>
      Effect.gen(function*() {
        const id = yield* Input.param(c, "id", OrderId)
        const order = yield* Domain.getOrder(schema, id)
        if (order === undefined) return yield* new OrderNotFound({ message: `no order ${id}` })
        return order
      }), { statuses: { OrderNotFound: 404 } })
  )
  return app
}
