/**
 * The message model: what the outbox stores, the relay publishes and consumers receive.
 * @module
 */
import { Schema } from "effect"

/** A UUIDv7 string: time-ordered, so ids sort roughly by creation. */
export const MessageId = Schema.String.check(Schema.isUUID())

const NonEmpty = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(255))

/** String headers carried with a message; `traceparent` holds the W3C trace context of the append. */
export const Headers = Schema.Record(Schema.String, Schema.String)
export type Headers = typeof Headers.Type

/** An event as written to the outbox and published: payload already encoded by its schema (JSON). */
export const Message = Schema.Struct({
  id: MessageId,
  type: NonEmpty,
  version: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  aggregateType: NonEmpty,
  aggregateId: NonEmpty,
  /** Events of one key are published in order by the per-key relay; defaults to the aggregate id. */
  orderingKey: NonEmpty,
  payload: Schema.Unknown,
  headers: Headers,
  occurredAt: Schema.Date
})
export interface Message extends Schema.Schema.Type<typeof Message> {}

/** Message with its dates as ISO strings: the wire format. */
export const MessageJson = Schema.Struct({ ...Message.fields, occurredAt: Schema.DateFromString })

/** Header names Tidings sets itself. */
export const HeaderNames = {
  traceparent: "traceparent"
} as const
