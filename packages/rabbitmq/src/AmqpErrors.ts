/**
 * The failure families of the RabbitMQ driver. Each is a `Schema.TaggedError` with an `isRetryable`
 * view; the connection, publisher and consumer decide on reconnecting, retrying and dead-lettering
 * from that view and from AMQP reply codes, never from message text. Messages never contain the
 * credentials of the broker URL.
 * @since 0.1.0
 * @module
 */
import { type Cause, Schema } from "effect"

const Code = Schema.optional(Schema.Union([Schema.Number, Schema.String]))

const AmqpConnectionErrorBase: Schema.Class<
  AmqpConnectionError,
  Schema.TaggedStruct<"AmqpConnectionError", {
    readonly operation: Schema.String
    readonly message: Schema.String
    /** AMQP reply code (e.g. 320, 403) or socket error code (e.g. `ECONNREFUSED`). */
    readonly code: Schema.optional<Schema.Union<readonly [Schema.Number, Schema.String]>>
    readonly retryable: Schema.Boolean
  }>,
  Cause.YieldableError
> = Schema.TaggedError<AmqpConnectionError>()("AmqpConnectionError", {
  operation: Schema.String,
  message: Schema.String,
  /** AMQP reply code (e.g. 320, 403) or socket error code (e.g. `ECONNREFUSED`). */
  code: Code,
  retryable: Schema.Boolean
})

/**
 * The broker connection (or a channel on it) failed or is not available: refused, reset, closed by
 * the broker (e.g. `320 CONNECTION_FORCED`), wrong credentials (`403`, not retryable).
 * @since 0.1.0
 * @category errors
 */
export class AmqpConnectionError extends AmqpConnectionErrorBase {
  get isRetryable(): boolean {
    return this.retryable
  }
  /** The broker cannot be reached right now (refused, reset, closed): work waits, it does not fail. */
  get isUnavailable(): boolean {
    return this.retryable
  }
}

const TopologyErrorBase: Schema.Class<
  TopologyError,
  Schema.TaggedStruct<"TopologyError", {
    readonly operation: Schema.String
    readonly entity: Schema.String
    readonly message: Schema.String
    readonly code: Schema.optional<Schema.Union<readonly [Schema.Number, Schema.String]>>
    readonly retryable: Schema.Boolean
  }>,
  Cause.YieldableError
> = Schema.TaggedError<TopologyError>()("TopologyError", {
  operation: Schema.String,
  entity: Schema.String,
  message: Schema.String,
  code: Code,
  retryable: Schema.Boolean
})

/**
 * Declaring an exchange, queue or binding failed. `406 PRECONDITION_FAILED` (a queue that exists
 * with other arguments) and `403` are configuration problems and not retryable; a lost connection is.
 * @since 0.1.0
 * @category errors
 */
export class TopologyError extends TopologyErrorBase {
  get isRetryable(): boolean {
    return this.retryable
  }
}

// Decoding and handler errors are every transport's: they live in core and are re-exported here
// for code written against `@tidings/rabbitmq`. Invalid settings are core's `InvalidConfig`.
export { HandlerTimeout } from "@tidings/core/Consumer"
export { DecodeError, DecodeFailure } from "@tidings/core/EventRegistry"
