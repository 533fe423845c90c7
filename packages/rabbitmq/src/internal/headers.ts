import type { MessageProperties } from "amqplib"

// AMQP header names set by the publisher and read by consumers (exported as `AmqpPublisher.HeaderNames`).
export const HeaderNames = {
  /** Event schema version (integer >= 1). */
  version: "tidings-version",
  aggregateType: "tidings-aggregate-type",
  aggregateId: "tidings-aggregate-id",
  orderingKey: "tidings-ordering-key",
  /** ISO-8601 time of the append. */
  occurredAt: "tidings-occurred-at",
  /** Handler attempts made before this copy (set by consumers on delayed retries). */
  attempt: "tidings-attempt",
  /** W3C trace context of the append, continued by the consumer's span. */
  traceparent: "traceparent"
} as const

/** The broker's delivery and death bookkeeping: it stays behind when a message is copied. */
export const brokerHeaders: ReadonlySet<string> = new Set([
  "x-delivery-count",
  "x-death",
  "x-first-death-exchange",
  "x-first-death-queue",
  "x-first-death-reason",
  "x-last-death-exchange",
  "x-last-death-queue",
  "x-last-death-reason"
])

/** The properties of a received message that a copy of it (a retry, a replay) carries over. */
export const copiedProperties = (properties: MessageProperties) => ({
  ...(properties.contentType == null ? {} : { contentType: String(properties.contentType) }),
  ...(properties.contentEncoding == null ? {} : { contentEncoding: String(properties.contentEncoding) }),
  ...(properties.type == null ? {} : { type: String(properties.type) }),
  ...(properties.timestamp == null ? {} : { timestamp: Number(properties.timestamp) }),
  ...(properties.appId == null ? {} : { appId: String(properties.appId) }),
  ...(properties.correlationId == null ? {} : { correlationId: String(properties.correlationId) })
})
