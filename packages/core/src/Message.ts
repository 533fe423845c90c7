/**
 * The message model: what the outbox stores, the relay publishes and consumers receive.
 * @since 0.1.0
 * @module
 */
import { Schema } from "effect"

/**
 * A UUIDv7 string: time-ordered, so ids sort roughly by creation.
 * @since 0.1.0
 * @category schemas
 */
export const MessageId: Schema.String = Schema.String.check(Schema.isUUID())

const NonEmpty = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(255))

/**
 * String headers carried with a message; `traceparent` holds the W3C trace context of the append.
 * @since 0.1.0
 * @category schemas
 */
export const Headers: Schema.$Record<Schema.String, Schema.String> = Schema.Record(Schema.String, Schema.String)
/**
 * @since 0.1.0
 * @category schemas
 */
export type Headers = typeof Headers.Type

/**
 * An event as written to the outbox and published: payload already encoded by its schema (JSON).
 * @since 0.1.0
 * @category schemas
 */
export const Message: Schema.Struct<{
  readonly id: Schema.String
  readonly type: Schema.String
  readonly version: Schema.Int
  readonly aggregateType: Schema.String
  readonly aggregateId: Schema.String
  /** Events of one key are published in order by the per-key relay; defaults to the aggregate id. */
  readonly orderingKey: Schema.String
  readonly payload: Schema.Unknown
  readonly headers: Schema.$Record<Schema.String, Schema.String>
  readonly occurredAt: Schema.Date
}> = Schema.Struct({
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
/**
 * @since 0.1.0
 * @category schemas
 */
export interface Message extends Schema.Schema.Type<typeof Message> {}

/**
 * Message with its dates as ISO strings: the wire format.
 * @since 0.1.0
 * @category schemas
 */
export const MessageJson: Schema.Struct<
  Omit<typeof Message.fields, "occurredAt"> & {
    readonly occurredAt: Schema.DateFromString
  }
> = Schema.Struct({ ...Message.fields, occurredAt: Schema.DateFromString })

/**
 * Header names Tidings sets itself.
 * @since 0.1.0
 * @category constants
 */
export const HeaderNames = {
  traceparent: "traceparent"
} as const

// The payload's JSON text as stored, on messages read back from a store: not enumerable, so it
// stays out of equality checks and spreads (a spread copy re-encodes when it is published).
const rawJson: unique symbol = Symbol.for("@tidings/core/Message/rawJson")

/**
 * A message whose payload is parsed from `json` only when read. A relay that only forwards the
 * message never parses it, and a publisher sends `json` as it is ({@link payloadJson}): parsing and
 * re-encoding were the largest share of the relay's own CPU per event.
 * @since 0.1.0
 * @category constructors
 */
export const fromStoredJson = (fields: Omit<Message, "payload">, json: string): Message => {
  let parsed: unknown
  let done = false
  // One object literal with a fixed shape (the getter is an own, enumerable property, so spreads
  // and equality see the payload): building it is several times cheaper than redefining properties.
  const message: Message = {
    id: fields.id,
    type: fields.type,
    version: fields.version,
    aggregateType: fields.aggregateType,
    aggregateId: fields.aggregateId,
    orderingKey: fields.orderingKey,
    get payload() {
      if (!done) {
        parsed = JSON.parse(json)
        done = true
      }
      return parsed
    },
    headers: fields.headers,
    occurredAt: fields.occurredAt
  }
  Object.defineProperty(message, rawJson, { value: json, enumerable: false })
  return message
}

/**
 * A copy of `message` with other headers; the payload stays unparsed if it was.
 * @since 0.1.0
 * @category combinators
 */
export const withHeaders = (message: Message, headers: Headers): Message => {
  const json = (message as { readonly [rawJson]?: string })[rawJson]
  if (json === undefined) return { ...message, headers }
  return fromStoredJson({
    id: message.id,
    type: message.type,
    version: message.version,
    aggregateType: message.aggregateType,
    aggregateId: message.aggregateId,
    orderingKey: message.orderingKey,
    headers,
    occurredAt: message.occurredAt
  }, json)
}

/**
 * The message's own fields as a plain object, in the schema's order (a stored payload is parsed):
 * what the admin views spread first when they show an outbox row.
 * @since 0.1.0
 * @category accessors
 */
export const toObject = (message: Message): Message => {
  const { id, type, version, aggregateType, aggregateId, orderingKey, payload, headers, occurredAt } = message
  return { id, type, version, aggregateType, aggregateId, orderingKey, payload, headers, occurredAt }
}

/**
 * The payload as JSON text: the stored text when the message came from a store, else encoded now.
 * @since 0.1.0
 * @category accessors
 */
export const payloadJson = (message: Message): string | undefined =>
  (message as { readonly [rawJson]?: string })[rawJson] ?? JSON.stringify(message.payload)
