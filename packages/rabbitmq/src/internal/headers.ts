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
