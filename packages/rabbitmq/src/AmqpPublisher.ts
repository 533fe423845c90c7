/**
 * The relay's `Publisher` on RabbitMQ: publisher confirms, persistent messages, `mandatory` routing.
 * A batch is written out at once and its confirms are awaited together (many in flight, not one
 * round trip per message). Each message's result is its own: a nack, a basic.return (unroutable), no
 * confirm within `confirmTimeout` or a channel that closed is a `PublishError` for that message, and
 * the relay retries it per its schedule. While the connection is down, `publish` fails at once.
 * @module
 */
import * as Errors from "@tidings/core/Errors"
import * as Message from "@tidings/core/Message"
import * as Publisher from "@tidings/core/Publisher"
import { Duration, Effect, Layer, Option, type Scope } from "effect"
import { Buffer } from "node:buffer"
import { AmqpConfigError, type AmqpConnectionError, type TopologyError } from "./AmqpErrors.ts"
import { AmqpConnection } from "./AmqpConnection.ts"
import * as ConfirmPublisher from "./internal/confirmPublisher.ts"
import { noStack } from "@tidings/core/Tracing"

/** AMQP header names set by the publisher and read by consumers. */
export const HeaderNames = {
  /** Event schema version (integer). */
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

/** Settings of {@link layer}. */
export interface Config {
  /** The exchange events are published to. */
  readonly exchange: string
  /** Routing key of a message (default: its event type, e.g. `order.placed`). */
  readonly routingKey?: (message: Message.Message) => string
  /** A message not confirmed this long after it was written fails (retryably) (default 10 s). Keep it below the relay's `publishTimeout`. */
  readonly confirmTimeout?: Duration.Input
  /** Confirm channels that concurrent batches (relay pollers) are spread over (default 1). */
  readonly channels?: number
  /**
   * A message no queue is bound for (basic.return) fails; `"retry"` (default) lets the relay retry it
   * later (a consumer queue may not be declared yet), `"fail"` fails it for good at once.
   */
  readonly unroutable?: "retry" | "fail"
  /** AMQP `app-id` property, e.g. the service name. */
  readonly appId?: string
}

/** The `Publisher` port plus what benchmarks and readiness checks want to see. */
export interface Service extends Publisher.Service {
  /** Messages written and not yet confirmed. */
  readonly inFlight: Effect.Effect<number>
  /** The most messages that were ever in flight at once. */
  readonly maxInFlight: Effect.Effect<number>
  /** How often publishing paused until amqplib's write buffer drained (channel backpressure). */
  readonly drainWaits: Effect.Effect<number>
}

const defaultRoutingKey = (message: Message.Message) => message.type

/** The AMQP form of a message: JSON body, persistent, `messageId` = event id, `type` = event type. */
export const toOutgoing = (
  message: Message.Message,
  options: { readonly exchange: string; readonly routingKey?: (message: Message.Message) => string; readonly appId?: string }
): ConfirmPublisher.Outgoing => ({
  exchange: options.exchange,
  routingKey: (options.routingKey ?? defaultRoutingKey)(message),
  // The stored JSON text when the relay read the message back (no parse and re-encode).
  content: Buffer.from(Message.payloadJson(message) ?? "null"),
  options: {
    messageId: message.id,
    type: message.type,
    persistent: true,
    mandatory: true,
    contentType: "application/json",
    contentEncoding: "utf-8",
    timestamp: Math.floor(message.occurredAt.getTime() / 1000),
    ...(options.appId === undefined ? {} : { appId: options.appId }),
    headers: {
      ...message.headers,
      [HeaderNames.version]: message.version,
      [HeaderNames.aggregateType]: message.aggregateType,
      [HeaderNames.aggregateId]: message.aggregateId,
      [HeaderNames.orderingKey]: message.orderingKey,
      [HeaderNames.occurredAt]: message.occurredAt.toISOString()
    }
  }
})

// A nack or a return is the broker refusing this message; a confirm that did not come is a timeout;
// a channel that closed under it is the broker going away (not this message's failure).
const reasonOf = (outcome: Extract<ConfirmPublisher.Outcome, { _tag: "Failed" }>): Errors.PublishErrorReason => {
  switch (outcome.kind) {
    case "nack":
    case "returned":
      return new Errors.Refused({ retryable: outcome.retryable })
    case "timeout":
      return new Errors.Timeout()
    case "closed":
      return new Errors.Unavailable()
    case "invalid":
      return new Errors.Invalid()
  }
}

const toPublishError = (outcome: Extract<ConfirmPublisher.Outcome, { _tag: "Failed" }>) =>
  new Errors.PublishError({ message: `${outcome.kind}: ${outcome.reason}`, reason: reasonOf(outcome) })

/** Builds the publisher; its confirm channels are re-opened after every reconnect. */
export const make = (config: Config): Effect.Effect<Service, AmqpConfigError | AmqpConnectionError | TopologyError, AmqpConnection | Scope.Scope> =>
  Effect.gen(function*() {
    const connection = yield* AmqpConnection
    if (typeof config.exchange !== "string") return yield* new AmqpConfigError({ path: "exchange", message: "must be a string" })
    const channels = config.channels ?? 1
    if (!Number.isInteger(channels) || channels < 1 || channels > 64) {
      return yield* new AmqpConfigError({ path: "channels", message: "must be an integer from 1 to 64" })
    }
    const timeout = Duration.fromInput(config.confirmTimeout ?? "10 seconds")
    const timeoutMs = Option.isSome(timeout) ? Duration.toMillis(timeout.value) : NaN
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      return yield* new AmqpConfigError({ path: "confirmTimeout", message: "must be a finite positive duration" })
    }
    const confirms = yield* ConfirmPublisher.make(connection, {
      name: "publisher",
      channels,
      unroutableRetryable: config.unroutable !== "fail"
    })
    const encodeOptions = {
      exchange: config.exchange,
      ...(config.routingKey === undefined ? {} : { routingKey: config.routingKey }),
      ...(config.appId === undefined ? {} : { appId: config.appId })
    }

    const publish = (messages: ReadonlyArray<Message.Message>) =>
      Effect.gen(function*() {
        if (messages.length === 0) return []
        const state = yield* connection.state
        // Fail fast rather than buffer: the relay keeps the events in the outbox and retries them.
        if (state._tag !== "Connected") {
          const last = "lastError" in state && state.lastError !== undefined ? `: ${state.lastError.message}` : ""
          return yield* new Errors.PublishError({ message: `RabbitMQ not connected (${state._tag})${last}`, reason: new Errors.Unavailable() })
        }
        if (state.blocked) {
          return yield* new Errors.PublishError({ message: "RabbitMQ blocked the connection (resource alarm)", reason: new Errors.Unavailable() })
        }
        const outgoing: Array<ConfirmPublisher.Outgoing> = []
        const invalid = new Map<number, Errors.PublishError>()
        for (const [i, message] of messages.entries()) {
          try {
            outgoing.push(toOutgoing(message, encodeOptions))
          } catch (cause) {
            // A routing-key function that throws or a payload that cannot be serialized fails again on every try.
            invalid.set(i, new Errors.PublishError({ message: `cannot encode message: ${String(cause)}`, reason: new Errors.Invalid() }))
          }
        }
        const outcomes = yield* confirms.publish(outgoing, timeoutMs).pipe(
          Effect.mapError((error) => new Errors.PublishError({ message: `RabbitMQ ${error.message}`, reason: error.retryable ? new Errors.Unavailable() : new Errors.Unknown({ retryable: false }) }))
        )
        let o = 0
        return messages.map((message, i): Publisher.PublishResult => {
          const bad = invalid.get(i)
          if (bad !== undefined) return Publisher.rejected(message.id, bad)
          const outcome = outcomes[o++]!
          return outcome._tag === "Confirmed" ? Publisher.published(message.id) : Publisher.rejected(message.id, toPublishError(outcome))
        })
      }).pipe(Effect.withSpan("tidings.amqp.publish", {
        kind: "producer",
        attributes: { "messaging.system": "rabbitmq", "messaging.destination.name": config.exchange, "messaging.batch.message_count": messages.length }
      }, noStack))

    return {
      publish,
      inFlight: Effect.sync(confirms.inFlight),
      maxInFlight: Effect.sync(confirms.maxInFlight),
      drainWaits: Effect.sync(confirms.drainWaits)
    } satisfies Service
  })

/** Provides core's `Publisher` port (for `Relay.layer`) on RabbitMQ. */
export const layer = (config: Config): Layer.Layer<Publisher.Publisher, AmqpConfigError | AmqpConnectionError | TopologyError, AmqpConnection> =>
  Layer.effect(Publisher.Publisher, Effect.map(make(config), (service) => Publisher.Publisher.of({ publish: service.publish })))
