/**
 * The one event type of the chaos run, shared by producers (who append it) and consumers (who decode
 * it). Its payload names the business row it belongs to, so every message can be traced back to a
 * committed (or rolled-back) transaction.
 * @module
 */
import { Event } from "@tidings/core"
import { Schema } from "effect"

/** Appended with every `chaos.orders` row, in the same transaction. */
export const OrderPlaced = Event.define("chaos.order_placed", {
  aggregateType: "order",
  schema: Schema.Struct({
    orderId: Schema.String,
    producer: Schema.String,
    seq: Schema.Int
  })
})

export type OrderPlaced = typeof OrderPlaced.schema.Type
