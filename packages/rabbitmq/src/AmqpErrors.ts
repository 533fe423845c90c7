/**
 * The failure families of the RabbitMQ driver. Each is a `Schema.TaggedError` with an `isRetryable`
 * view; the connection, publisher and consumer decide on reconnecting, retrying and dead-lettering
 * from that view and from AMQP reply codes, never from message text. Messages never contain the
 * credentials of the broker URL.
 * @module
 */
import { Schema } from "effect"

const Code = Schema.optional(Schema.Union([Schema.Number, Schema.String]))

/**
 * The broker connection (or a channel on it) failed or is not available: refused, reset, closed by
 * the broker (e.g. `320 CONNECTION_FORCED`), wrong credentials (`403`, not retryable).
 */
export class AmqpConnectionError extends Schema.TaggedError<AmqpConnectionError>()("AmqpConnectionError", {
  operation: Schema.String,
  message: Schema.String,
  /** AMQP reply code (e.g. 320, 403) or socket error code (e.g. `ECONNREFUSED`). */
  code: Code,
  retryable: Schema.Boolean
}) {
  get isRetryable(): boolean {
    return this.retryable
  }
}

/**
 * Declaring an exchange, queue or binding failed. `406 PRECONDITION_FAILED` (a queue that exists
 * with other arguments) and `403` are configuration problems and not retryable; a lost connection is.
 */
export class TopologyError extends Schema.TaggedError<TopologyError>()("TopologyError", {
  operation: Schema.String,
  entity: Schema.String,
  message: Schema.String,
  code: Code,
  retryable: Schema.Boolean
}) {
  get isRetryable(): boolean {
    return this.retryable
  }
}

/** Settings that cannot work (a URL that is not `amqp(s)://`, a prefetch of 0, ...). */
export class AmqpConfigError extends Schema.TaggedError<AmqpConfigError>()("AmqpConfigError", {
  path: Schema.String,
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/** Why a delivery could not be decoded. */
export const DecodeFailure = Schema.Literals([
  "TooLarge",
  "InvalidJson",
  "SchemaMismatch",
  "MissingType",
  "UnsupportedContentType"
])
export type DecodeFailure = typeof DecodeFailure.Type

/** A delivery that can never be decoded: a permanent failure, dead-lettered by default. */
export class DecodeError extends Schema.TaggedError<DecodeError>()("DecodeError", {
  reason: DecodeFailure,
  eventType: Schema.optional(Schema.String),
  version: Schema.optional(Schema.Number),
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/** A handler ran longer than the consumer's processing timeout: transient, retried. */
export class HandlerTimeout extends Schema.TaggedError<HandlerTimeout>()("HandlerTimeout", {
  timeoutMs: Schema.Number
}) {
  get isRetryable(): boolean {
    return true
  }
}
