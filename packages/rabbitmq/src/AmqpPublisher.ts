/**
 * The relay's `Publisher` on RabbitMQ: publisher confirms, persistent messages, `mandatory` routing.
 * A batch is written out at once and its confirms are awaited together (many in flight, not one
 * round trip per message). Each message's result is its own: a nack, a basic.return (unroutable), no
 * confirm within `confirmTimeout` or a channel that closed is a `PublishError` for that message, and
 * the relay retries it per its schedule.
 *
 * While the connection is down or blocked by a resource alarm, `publish` fails at once with reason
 * `Unavailable` (and a confirm that did not come while it was so is `Unavailable` too, not a
 * timeout of the message), and `awaitAvailable` waits for the broker: the relay pauses instead of
 * counting attempts.
 * @since 0.1.0
 * @module
 */
import * as Errors from "@tidings/core/Errors"
import type { InvalidConfig } from "@tidings/core/Errors"
import * as Message from "@tidings/core/Message"
import * as Publisher from "@tidings/core/Publisher"
import * as Settings from "@tidings/core/Settings"
import * as Tracing from "@tidings/core/Tracing"
import { Duration, Effect, Layer, Schema, type Scope } from "effect"
import { Buffer } from "node:buffer"
import { AmqpConnection } from "./AmqpConnection.ts"
import type { AmqpConnectionError, TopologyError } from "./AmqpErrors.ts"
import * as ConfirmPublisher from "./internal/confirmPublisher.ts"
import { HeaderNames } from "./internal/headers.ts"

export {
  /**
   * AMQP header names set by the publisher and read by consumers.
   * @since 0.1.0
   * @category constants
   */
  HeaderNames
}

/**
 * Settings of {@link layer}.
 * @since 0.1.0
 * @category models
 */
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

/**
 * The settings of {@link Config} that are data, with their defaults.
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema: Schema.Struct<{
  readonly exchange: Schema.String
  readonly confirmTimeout: Settings.Defaulted<Settings.DurationSetting>
  readonly channels: Settings.Defaulted<Settings.IntSetting>
  readonly unroutable: Settings.Defaulted<Schema.Literals<readonly ["retry", "fail"]>>
  readonly appId: Schema.optional<Schema.String>
}> = Schema.Struct({
  exchange: Schema.String,
  confirmTimeout: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("10 seconds"))),
  channels: Settings.int(1, 64).pipe(Schema.withDecodingDefault(Effect.succeed(1))),
  unroutable: Schema.Literals(["retry", "fail"]).pipe(Schema.withDecodingDefault(Effect.succeed("retry" as const))),
  appId: Schema.optional(Schema.String)
})

/**
 * The `Publisher` port plus what benchmarks and readiness checks want to see.
 * @since 0.1.0
 * @category models
 */
export interface Service extends Publisher.Service {
  /** `rabbitmq`, the exchange and the broker's host and port, for spans. */
  readonly destination: Tracing.Destination
  /** Completes when the connection is up and not blocked (at once if it is). */
  readonly awaitAvailable: Effect.Effect<void>
  /** Messages written and not yet confirmed. */
  readonly inFlight: Effect.Effect<number>
  /** The most messages that were ever in flight at once. */
  readonly maxInFlight: Effect.Effect<number>
  /** How often publishing paused until amqplib's write buffer drained (channel backpressure). */
  readonly drainWaits: Effect.Effect<number>
}

const defaultRoutingKey = (message: Message.Message) => message.type

/**
 * The AMQP form of a message: JSON body, persistent, `messageId` = event id, `type` = event type.
 * @since 0.1.0
 * @category encoding
 */
export const toOutgoing = (
  message: Message.Message,
  options: {
    readonly exchange: string
    readonly routingKey?: (message: Message.Message) => string
    readonly appId?: string
  }
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

/**
 * Builds the publisher; its confirm channels are re-opened after every reconnect.
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  config: Config
): Effect.Effect<Service, InvalidConfig | AmqpConnectionError | TopologyError, AmqpConnection | Scope.Scope> =>
  Effect.gen(function*() {
    const s = yield* Settings.decode(ConfigSchema, config)
    const connection = yield* AmqpConnection
    const timeoutMs = Duration.toMillis(s.confirmTimeout)
    const destination: Tracing.Destination = {
      system: "rabbitmq",
      name: s.exchange,
      ...Tracing.serverOf(connection.description, 5672)
    }
    const confirms = yield* ConfirmPublisher.make(connection, {
      name: "publisher",
      channels: s.channels,
      unroutableRetryable: s.unroutable !== "fail"
    })
    const encodeOptions = {
      exchange: s.exchange,
      ...(config.routingKey === undefined ? {} : { routingKey: config.routingKey }),
      ...(s.appId === undefined ? {} : { appId: s.appId })
    }
    /** Why publishing cannot happen now, if it cannot. */
    const unavailable = Effect.map(connection.state, (state) => {
      if (state._tag !== "Connected") {
        const last = "lastError" in state && state.lastError !== undefined ? `: ${state.lastError.message}` : ""
        return `RabbitMQ not connected (${state._tag})${last}`
      }
      return state.blocked ? "RabbitMQ blocked the connection (resource alarm)" : undefined
    })

    const publish = (messages: ReadonlyArray<Message.Message>) =>
      Effect.gen(function*() {
        if (messages.length === 0) return []
        // Fail fast rather than buffer: the relay keeps the events in the outbox and waits.
        const down = yield* unavailable
        if (down !== undefined) {
          return yield* new Errors.PublishError({ message: down, reason: new Errors.Unavailable() })
        }
        const outgoing: Array<ConfirmPublisher.Outgoing> = []
        const invalid = new Map<number, Errors.PublishError>()
        for (const [i, message] of messages.entries()) {
          try {
            outgoing.push(toOutgoing(message, encodeOptions))
          } catch (cause) {
            // A routing-key function that throws or a payload that cannot be serialized fails again on every try.
            invalid.set(
              i,
              new Errors.PublishError({
                message: `cannot encode message: ${Errors.describe(cause)}`,
                reason: new Errors.Invalid()
              })
            )
          }
        }
        const outcomes = yield* confirms.publish(outgoing, timeoutMs).pipe(
          Effect.mapError((error) =>
            new Errors.PublishError({
              message: `RabbitMQ ${error.message}`,
              reason: error.retryable ? new Errors.Unavailable() : new Errors.Unknown({ retryable: false })
            })
          )
        )
        // A confirm that did not come because the broker went away or blocked us says nothing
        // about the message: it is unavailability, which the relay does not count as an attempt.
        const downNow = outcomes.some((o) => o._tag === "Failed" && o.kind === "timeout")
          ? yield* unavailable
          : undefined
        let o = 0
        return messages.map((message, i): Publisher.PublishResult => {
          const bad = invalid.get(i)
          if (bad !== undefined) return Publisher.rejected(message.id, bad)
          const outcome = outcomes[o++]!
          if (outcome._tag === "Confirmed") return Publisher.published(message.id)
          if (outcome.kind === "timeout" && downNow !== undefined) {
            return Publisher.rejected(
              message.id,
              new Errors.PublishError({ message: `${outcome.reason} (${downNow})`, reason: new Errors.Unavailable() })
            )
          }
          return Publisher.rejected(message.id, toPublishError(outcome))
        })
      }).pipe(Effect.withSpan(Tracing.spanName("publish", s.exchange), {
        ...Tracing.noStack,
        kind: "producer",
        // One message: a child of the caller's span (the relay's `send`); a batch: linked to each message's.
        links: messages.length === 1 ? [] : messages.flatMap((m) => {
          const span = Tracing.parentFromHeaders(m.headers)
          return span === undefined ? [] : [{ span, attributes: { "messaging.message.id": m.id } }]
        }),
        attributes: {
          ...Tracing.messagingAttributes({ type: "send", name: "publish" }, destination),
          ...(messages.length === 1
            ? { "messaging.message.id": messages[0]!.id }
            : { "messaging.batch.message_count": messages.length })
        }
      }))

    return {
      publish,
      destination,
      awaitAvailable: connection.awaitAvailable,
      inFlight: Effect.sync(confirms.inFlight),
      maxInFlight: Effect.sync(confirms.maxInFlight),
      drainWaits: Effect.sync(confirms.drainWaits)
    } satisfies Service
  })

/**
 * Provides core's `Publisher` port (for `Relay.layer`) on RabbitMQ, with `awaitAvailable`.
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  config: Config
): Layer.Layer<Publisher.Publisher, InvalidConfig | AmqpConnectionError | TopologyError, AmqpConnection> =>
  Layer.effect(
    Publisher.Publisher,
    Effect.map(make(config), (service) =>
      Publisher.Publisher.of({
        publish: service.publish,
        awaitAvailable: service.awaitAvailable,
        destination: service.destination
      }))
  )

/**
 * The publisher's environment variables: `TIDINGS_EXCHANGE` (the exchange events go to),
 * `TIDINGS_PUBLISHER_CONFIRM_TIMEOUT`, `TIDINGS_PUBLISHER_CHANNELS`, `TIDINGS_PUBLISHER_UNROUTABLE`,
 * `TIDINGS_PUBLISHER_APP_ID`.
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = {
  component: "AmqpPublisher",
  schema: ConfigSchema,
  prefix: "TIDINGS_PUBLISHER",
  names: { exchange: "TIDINGS_EXCHANGE" }
}

/**
 * {@link layer} with its settings from the environment on top of `options.defaults` (which also
 * carry `routingKey`); a wrong variable fails with one `InvalidConfig` naming every wrong variable.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Settings.EnvironmentOptions<Partial<Config>> = {}
): Layer.Layer<Publisher.Publisher, InvalidConfig | AmqpConnectionError | TopologyError, AmqpConnection> =>
  Layer.unwrap(Effect.map(Settings.read(environment, options), (s) => layer({ ...options.defaults, ...s })))
