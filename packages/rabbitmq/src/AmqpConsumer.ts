/**
 * A RabbitMQ consumer: runs a handler Effect per delivery, with a prefetch and a concurrency limit,
 * decoding payloads through an {@link EventRegistry.EventRegistry}. What happens to a delivery is
 * decided from its typed outcome by a table that callers can override ({@link defaultDecision}):
 *
 * | outcome | decision |
 * |---|---|
 * | success | ack |
 * | transient failure: `isRetryable` error, timeout, defect | retry (delayed retry queue, or requeue) — dead-letter once `maxAttempts` is reached |
 * | permanent failure: non-retryable error, undecodable payload | dead-letter |
 * | delivered more than `maxAttempts` times | dead-letter without running the handler |
 * | unknown event type | ack (configurable) |
 * | shutdown before the handler started | requeue |
 *
 * The consume channel is re-opened with its prefetch after every reconnect. A handler defect is
 * caught and counted; nothing a message does stops the consumer.
 * @module
 */
import * as Errors from "@tidings/core/Errors"
import * as Metrics from "@tidings/core/Metrics"
import type { Channel, ConsumeMessage, MessageProperties } from "amqplib"
import { Cause, Clock, Duration, Effect, Exit, Fiber, Layer, Metric, Option, Pull, Queue, type Scope } from "effect"
import { AmqpConnection } from "./AmqpConnection.ts"
import { AmqpConfigError, type AmqpConnectionError, DecodeError, HandlerTimeout, type TopologyError } from "./AmqpErrors.ts"
import { HeaderNames } from "./AmqpPublisher.ts"
import type * as EventRegistry from "./EventRegistry.ts"
import { connectionError } from "./internal/amqpError.ts"
import * as ConfirmPublisher from "./internal/confirmPublisher.ts"
import type * as Topology from "./Topology.ts"
import * as Tracing from "@tidings/core/Tracing"
import { noStack } from "@tidings/core/Tracing"

/** What to do with a delivery. `retry` is a delayed retry when retry queues exist, else a requeue. */
export type Decision = "ack" | "retry" | "requeue" | "dead-letter"

/** How handling a delivery turned out; the input of the decision table. */
export type Outcome<E> =
  | { readonly _tag: "Success" }
  | { readonly _tag: "Failure"; readonly error: E; readonly retryable: boolean }
  | { readonly _tag: "Defect"; readonly defect: unknown }
  | { readonly _tag: "Timeout"; readonly error: HandlerTimeout }
  | { readonly _tag: "DecodeFailure"; readonly error: DecodeError }
  | { readonly _tag: "UnknownType"; readonly type: string }
  | { readonly _tag: "DeliveryLimit"; readonly attempt: number }
  | { readonly _tag: "Shutdown" }

/** What the decision table knows besides the outcome. */
export interface DecisionContext {
  /** 1 for the first delivery; counts delayed retries and broker redeliveries. */
  readonly attempt: number
  readonly maxAttempts: number
  /** The configured decision for unknown event types. */
  readonly unknownType: Decision
}

/** A delivery handed to the handler. */
export interface Delivery<A> {
  /** The decoded event, in its current version. */
  readonly event: A
  readonly messageId: string | undefined
  /** 1 for the first delivery; handlers may use it to give up differently. */
  readonly attempt: number
  readonly redelivered: boolean
  readonly aggregateType: string | undefined
  readonly aggregateId: string | undefined
  readonly orderingKey: string | undefined
  readonly occurredAt: Date | undefined
  readonly headers: Readonly<Record<string, unknown>>
  readonly exchange: string
  readonly routingKey: string
}

/** Settings of a consumer. */
export interface Config<A, E, R> {
  /** Names the consumer in metrics, logs and its consumer tag. */
  readonly name: string
  /** A queue name, or a {@link Topology.consumerQueue} (declared on every connect; its retry queues enable delayed retries). */
  readonly queue: string | Topology.ConsumerQueue
  readonly registry: EventRegistry.EventRegistry<A>
  readonly handler: (delivery: Delivery<A>) => Effect.Effect<void, E, R>
  /** Handlers running at once (default 10). */
  readonly concurrency?: number
  /** Unacknowledged deliveries the broker sends ahead (default 2 × concurrency). */
  readonly prefetch?: number
  /** A handler running longer is interrupted; the delivery counts as a transient failure (default 30 s). */
  readonly timeout?: Duration.Input
  /** Handler attempts before a transient failure dead-letters the delivery (default 5). */
  readonly maxAttempts?: number
  /** Bodies larger than this are dead-lettered undecoded (default 1 MiB). */
  readonly maxBodyBytes?: number
  /**
   * `delayed` (default when the queue has retry queues): a copy waits in a retry queue. `requeue`:
   * immediate redelivery; on a quorum queue the broker counts it, on a classic queue (which cannot)
   * a copy with the attempt count goes to the back of the queue.
   */
  readonly retry?: "delayed" | "requeue"
  /** Decision for event types missing from the registry (default `ack`: another service's events). */
  readonly unknownType?: Decision
  /** Overrides the table; return `undefined` to keep {@link defaultDecision}. */
  readonly decide?: (outcome: Outcome<E>, context: DecisionContext) => Decision | undefined
  /** How long shutdown waits for running handlers before interrupting (and requeueing) them (default 10 s). */
  readonly shutdownTimeout?: Duration.Input
  /** Confirm timeout of the copies published to retry queues (default 10 s). */
  readonly retryConfirmTimeout?: Duration.Input
}

/** A running consumer. */
export interface Service {
  readonly name: string
  readonly queue: string
  /** Subscribed to its queue right now (false while reconnecting or after shutdown began). */
  readonly isConsuming: Effect.Effect<boolean>
  /** Handlers running right now. */
  readonly inFlight: Effect.Effect<number>
}

/** Consumer metrics (the series every transport records; see `Metrics.consumer` in core). */
export const metrics = Metrics.consumer

/** Whether a handler error is transient: its `isRetryable` (or `retryable`) is true, or it is an Effect timeout. */
export const isRetryable: (error: unknown) => boolean = Errors.isRetryable

/** The default decision table (see the module docs). */
export const defaultDecision = <E>(outcome: Outcome<E>, context: DecisionContext): Decision => {
  const transient = (): Decision => context.attempt >= context.maxAttempts ? "dead-letter" : "retry"
  switch (outcome._tag) {
    case "Success":
      return "ack"
    case "Failure":
      return outcome.retryable ? transient() : "dead-letter"
    case "Defect":
    case "Timeout":
      return transient()
    case "DecodeFailure":
    case "DeliveryLimit":
      return "dead-letter"
    case "UnknownType":
      return context.unknownType
    case "Shutdown":
      return "requeue"
  }
}

const toInt = (value: unknown): number | undefined => {
  const n = typeof value === "number" ? value : typeof value === "bigint" ? Number(value) : typeof value === "string" && /^\d+$/.test(value) ? Number(value) : NaN
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined
}

const str = (value: unknown): string | undefined => typeof value === "string" ? value : undefined

/** 1 + delayed retries so far (our header) + broker redeliveries of this copy (quorum's count, or the redelivered flag). */
export const attemptOf = (message: ConsumeMessage): number => {
  const headers = message.properties.headers ?? {}
  const retries = toInt(headers[HeaderNames.attempt]) ?? 0
  const deliveries = toInt(headers["x-delivery-count"]) ?? (message.fields.redelivered ? 1 : 0)
  return retries + deliveries + 1
}

const isJsonContentType = (contentType: unknown) =>
  contentType === undefined || contentType === null || contentType === "" ||
  (typeof contentType === "string" && /^(application|text)\/([\w.+-]*\+)?json\s*(;.*)?$/i.test(contentType))

/** Broker bookkeeping headers that must not travel with a retry copy. */
const brokerHeaders = new Set(["x-delivery-count", "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason", "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"])

const copyProperties = (properties: MessageProperties, messageId: string, headers: Record<string, unknown>) => ({
  messageId,
  persistent: true,
  mandatory: true,
  headers,
  ...(properties.contentType == null ? {} : { contentType: String(properties.contentType) }),
  ...(properties.contentEncoding == null ? {} : { contentEncoding: String(properties.contentEncoding) }),
  ...(properties.type == null ? {} : { type: String(properties.type) }),
  ...(properties.timestamp == null ? {} : { timestamp: Number(properties.timestamp) }),
  ...(properties.appId == null ? {} : { appId: String(properties.appId) }),
  ...(properties.correlationId == null ? {} : { correlationId: String(properties.correlationId) }),
  ...(properties.replyTo == null ? {} : { replyTo: String(properties.replyTo) }),
  ...(properties.priority == null ? {} : { priority: Number(properties.priority) })
})

interface Item {
  readonly message: ConsumeMessage
  readonly channel: Channel
}

const positiveInt = (path: string, value: number | undefined, fallback: number, max: number) => {
  const n = value ?? fallback
  return Number.isInteger(n) && n >= 1 && n <= max
    ? Effect.succeed(n)
    : Effect.fail(new AmqpConfigError({ path, message: `must be an integer from 1 to ${max}` }))
}

const durationMs = (path: string, value: Duration.Input | undefined, fallback: Duration.Input) => {
  const d = Duration.fromInput(value ?? fallback)
  const ms = Option.isSome(d) ? Duration.toMillis(d.value) : NaN
  return Number.isFinite(ms) && ms > 0 ? Effect.succeed(ms) : Effect.fail(new AmqpConfigError({ path, message: "must be a finite positive duration" }))
}

let tagCounter = 0
// Consumer tags must be unique per channel; this makes them unique per process too, for the broker's views.
const tagPrefix = Math.random().toString(36).slice(2, 8)

/**
 * Starts a consumer for as long as the scope lives. It subscribes once connected (at once when the
 * connection is up, failing on a topology or channel error) and again after every reconnect.
 * Closing the scope shuts down gracefully: cancel the subscription, requeue what did not start,
 * let running handlers finish within `shutdownTimeout` (then interrupt and requeue them), close.
 */
export const make = <A, E, R>(
  config: Config<A, E, R>
): Effect.Effect<Service, AmqpConfigError | AmqpConnectionError | TopologyError, AmqpConnection | Scope.Scope | R> =>
  Effect.gen(function*() {
    const connection = yield* AmqpConnection
    const handlerContext = yield* Effect.context<R>()
    if (!/^[\w.:-]{1,100}$/.test(config.name)) {
      return yield* new AmqpConfigError({ path: "name", message: "must be 1-100 characters of [A-Za-z0-9_.:-]" })
    }
    const concurrency = yield* positiveInt("concurrency", config.concurrency, 10, 1000)
    const prefetch = yield* positiveInt("prefetch", config.prefetch, concurrency * 2, 65535)
    const maxAttempts = yield* positiveInt("maxAttempts", config.maxAttempts, 5, 1000)
    const maxBodyBytes = yield* positiveInt("maxBodyBytes", config.maxBodyBytes, 1024 * 1024, 512 * 1024 * 1024)
    const timeoutMs = yield* durationMs("timeout", config.timeout, "30 seconds")
    const shutdownMs = yield* durationMs("shutdownTimeout", config.shutdownTimeout, "10 seconds")
    const retryConfirmMs = yield* durationMs("retryConfirmTimeout", config.retryConfirmTimeout, "10 seconds")
    const queue = typeof config.queue === "string" ? config.queue : config.queue.queue
    const retryQueues = typeof config.queue === "string" ? [] : config.queue.retryQueues
    const retryMode = config.retry ?? (retryQueues.length > 0 ? "delayed" : "requeue")
    if (retryMode === "delayed" && retryQueues.length === 0) {
      return yield* new AmqpConfigError({ path: "retry", message: "delayed retries need a consumer queue with retry queues (Topology.consumerQueue)" })
    }
    const unknownType = config.unknownType ?? "ack"
    const attrs = { consumer: config.name }
    const counter = (metric: Metric.Counter<number>, extra: Record<string, string> = {}) =>
      Metric.update(Metric.withAttributes(metric, { ...attrs, ...extra }), 1)
    const annotate = Effect.annotateLogs({ consumer: config.name, queue })

    const inbox = yield* Queue.unbounded<Item, Cause.Done>()
    let stopping = false
    let openChannel: Channel | undefined
    let consuming: { readonly channel: Channel; readonly tag: string } | undefined
    let inFlight = 0

    const queueType = typeof config.queue === "string" ? undefined : config.queue.type

    // Registered before the workers and the shutdown finalizer: scopes release in reverse, so the
    // channels close last, after the graceful shutdown below. The confirm channel carries retry
    // copies (to retry queues, or back to a classic work queue that cannot count deliveries).
    const retries = yield* ConfirmPublisher.make(connection, { name: `consumer:${config.name}/retry`, channels: 1, unroutableRetryable: true })

    yield* connection.register({
      name: `consumer:${config.name}`,
      open: (channels) =>
        Effect.gen(function*() {
          if (typeof config.queue !== "string") yield* channels.declare(config.queue.topology)
          const channel = yield* channels.channel
          channel.on("close", () => {
            if (openChannel === channel) openChannel = undefined
            if (consuming?.channel === channel) consuming = undefined
          })
          yield* Effect.tryPromise({
            try: () => channel.prefetch(prefetch),
            catch: (error) => connectionErrorOf("prefetch", error)
          })
          openChannel = channel
          if (stopping) return
          const tag = `${config.name}.${tagPrefix}.${(tagCounter++).toString(36)}`
          const reply = yield* Effect.tryPromise({
            try: () =>
              channel.consume(queue, (message) => {
                if (message === null) {
                  // The broker cancelled us (queue deleted or failed over): a new channel re-declares and resubscribes.
                  channel.close().catch(() => undefined)
                  return
                }
                if (stopping || !Queue.offerUnsafe(inbox, { message, channel })) {
                  try {
                    channel.nack(message, false, true)
                  } catch {
                    // channel gone: the broker requeues it anyway
                  }
                }
              }, { noAck: false, consumerTag: tag }),
            catch: (error) => connectionErrorOf("consume", error)
          })
          consuming = { channel, tag: reply.consumerTag }
        }),
      onClose: () =>
        Effect.sync(() => {
          consuming = undefined
        })
    })

    function connectionErrorOf(operation: string, error: unknown) {
      return connectionError(operation, error, connection.scrub)
    }

    const decide = (outcome: Outcome<E>, attempt: number): Decision => {
      const context: DecisionContext = { attempt, maxAttempts, unknownType }
      return config.decide?.(outcome, context) ?? defaultDecision(outcome, context)
    }

    /** ack / nack on the delivery's own channel; a closed channel means the broker redelivers it. */
    const onChannel = (item: Item, f: (channel: Channel) => void) =>
      Effect.sync(() => {
        try {
          f(item.channel)
          return true
        } catch {
          return false
        }
      })

    const outcomeLabel = (outcome: Outcome<E>) => outcome._tag === "Failure" ? (outcome.retryable ? "TransientFailure" : "PermanentFailure") : outcome._tag

    const requeueItem = (item: Item, mode: string) =>
      Effect.flatMap(onChannel(item, (ch) => ch.nack(item.message, false, true)), (ok) => ok ? counter(metrics.retried, { mode }) : Effect.void)

    /** Publishes a copy (with the attempt count) to `routingKey` via the default exchange, then acks the original. */
    const republish = (item: Item, routingKey: string, attempt: number, mode: string) =>
      Effect.gen(function*() {
        const { message } = item
        const headers: Record<string, unknown> = {}
        for (const [k, v] of Object.entries(message.properties.headers ?? {})) if (!brokerHeaders.has(k)) headers[k] = v
        headers[HeaderNames.attempt] = attempt
        const messageId = str(message.properties.messageId) ?? crypto.randomUUID()
        const published = yield* retries.publish([{
          exchange: "",
          routingKey,
          content: message.content,
          options: copyProperties(message.properties, messageId, headers)
        }], retryConfirmMs).pipe(Effect.result)
        const outcome = published._tag === "Success" ? published.success[0] : undefined
        if (outcome?._tag === "Confirmed") {
          // The copy is safe; if this ack is lost the original comes back too (at-least-once).
          yield* onChannel(item, (ch) => ch.ack(message))
          return yield* counter(metrics.retried, { mode })
        }
        const why = published._tag === "Failure" ? published.failure.message : outcome?._tag === "Failed" ? outcome.reason : "no outcome"
        yield* Effect.logWarning(`retry copy to ${routingKey} failed (${why}); requeueing instead`)
        return yield* requeueItem(item, "requeue")
      })

    const settle = (item: Item, decision: Decision, outcome: Outcome<E>, attempt: number) =>
      Effect.gen(function*() {
        const { message } = item
        const requeue = (mode: string) => requeueItem(item, mode)
        switch (decision) {
          case "ack":
            if (yield* onChannel(item, (ch) => ch.ack(message))) yield* counter(metrics.acked)
            return
          case "dead-letter":
            if (yield* onChannel(item, (ch) => ch.nack(message, false, false))) yield* counter(metrics.deadLettered, { reason: outcomeLabel(outcome) })
            return
          case "requeue":
            return yield* requeue(outcome._tag === "Shutdown" ? "shutdown" : "requeue")
          case "retry": {
            if (retryMode === "delayed") {
              const target = retryQueues[Math.min(attempt, retryQueues.length) - 1]!
              return yield* republish(item, target.name, attempt, "delayed")
            }
            // Quorum queues count redeliveries (x-delivery-count) so a requeue is enough; a classic
            // queue only says "redelivered", so its copy goes back with our own attempt count.
            const headers = message.properties.headers ?? {}
            const counted = queueType === "quorum" ||
              (queueType === undefined && (headers["x-delivery-count"] !== undefined || !message.fields.redelivered))
            return yield* (counted ? requeue("requeue") : republish(item, queue, attempt, "requeue"))
          }
        }
      }).pipe(Effect.uninterruptible)

    const decodeDelivery = (message: ConsumeMessage): Outcome<E> | { readonly _tag: "Decoded"; readonly delivery: Delivery<A>; readonly note?: EventRegistry.Note } => {
      const { properties, fields, content } = message
      const headers = properties.headers ?? {}
      const type = str(properties.type)
      const version = toInt(headers[HeaderNames.version])
      const failure = (reason: DecodeError["reason"], text: string): Outcome<E> => ({
        _tag: "DecodeFailure",
        error: new DecodeError({ reason, message: text, ...(type === undefined ? {} : { eventType: type }), ...(version === undefined ? {} : { version }) })
      })
      if (content.length > maxBodyBytes) return failure("TooLarge", `body of ${content.length} bytes exceeds the limit of ${maxBodyBytes}`)
      if (!isJsonContentType(properties.contentType)) return failure("UnsupportedContentType", `content type ${String(properties.contentType)} is not JSON`)
      if (type === undefined || type === "") return failure("MissingType", "the message has no type property")
      let json: unknown
      try {
        json = JSON.parse(content.toString("utf8"))
      } catch (error) {
        return failure("InvalidJson", `body is not JSON: ${error instanceof Error ? error.message : String(error)}`)
      }
      const result = config.registry.decode(type, version, json)
      if (result._tag === "UnknownType") return { _tag: "UnknownType", type }
      if (result._tag === "Invalid") return { _tag: "DecodeFailure", error: result.error }
      const occurred = str(headers[HeaderNames.occurredAt])
      const delivery: Delivery<A> = {
        event: result.event,
        messageId: str(properties.messageId),
        attempt: attemptOf(message),
        redelivered: fields.redelivered,
        aggregateType: str(headers[HeaderNames.aggregateType]),
        aggregateId: str(headers[HeaderNames.aggregateId]),
        orderingKey: str(headers[HeaderNames.orderingKey]),
        occurredAt: occurred === undefined ? undefined : new Date(occurred),
        headers,
        exchange: fields.exchange,
        routingKey: fields.routingKey
      }
      return result.note === undefined ? { _tag: "Decoded", delivery } : { _tag: "Decoded", delivery, note: result.note }
    }

    const runHandler = (delivery: Delivery<A>) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        const exit = yield* config.handler(delivery).pipe(
          Effect.provideContext(handlerContext),
          Effect.timeoutOrElse({ duration: timeoutMs, orElse: () => Effect.fail(new HandlerTimeout({ timeoutMs })) }),
          Effect.exit
        )
        let outcome: Outcome<E>
        if (Exit.isSuccess(exit)) {
          outcome = { _tag: "Success" }
        } else if (Cause.hasInterruptsOnly(exit.cause)) {
          // Shutdown deadline: the interrupt goes on, and the delivery is requeued by the caller.
          return yield* Effect.interrupt
        } else {
          const error = Cause.findErrorOption(exit.cause)
          if (Option.isSome(error)) {
            outcome = error.value instanceof HandlerTimeout
              ? { _tag: "Timeout", error: error.value }
              : { _tag: "Failure", error: error.value as E, retryable: isRetryable(error.value) }
          } else {
            yield* counter(metrics.defects)
            yield* Effect.logError("consumer handler defect (treated as a transient failure)", exit.cause)
            outcome = { _tag: "Defect", defect: Cause.squash(exit.cause) }
          }
        }
        const elapsed = ((yield* Clock.currentTimeMillis) - started) / 1000
        yield* Metric.update(Metric.withAttributes(metrics.handleDuration, { ...attrs, outcome: outcomeLabel(outcome) }), elapsed)
        return outcome
      })

    const handle = (item: Item) => {
      const { message } = item
      const headers = message.properties.headers ?? {}
      const attempt = attemptOf(message)
      const parent = Tracing.parseTraceparent(headers[HeaderNames.traceparent])
      const messageId = str(message.properties.messageId)
      const eventType = str(message.properties.type)
      return Effect.gen(function*() {
        yield* counter(metrics.consumed)
        let outcome: Outcome<E>
        if (attempt > maxAttempts) {
          outcome = { _tag: "DeliveryLimit", attempt }
        } else {
          const decoded = decodeDelivery(message)
          if (decoded._tag === "Decoded") {
            if (decoded.note !== undefined) {
              yield* Effect.logWarning(`${eventType} v${toInt(headers[HeaderNames.version])}: ${decoded.note === "newer-version" ? "newer than the registered version" : "no upcaster for this version"}; decoded best-effort with the current schema`)
            }
            outcome = yield* runHandler(decoded.delivery)
          } else {
            outcome = decoded
          }
        }
        const decision = decide(outcome, attempt)
        yield* Effect.annotateCurrentSpan({ "tidings.consumer.outcome": outcomeLabel(outcome), "tidings.consumer.decision": decision })
        if (outcome._tag === "UnknownType") yield* Effect.logInfo(`unknown event type ${outcome.type}: ${decision}`)
        else if (outcome._tag === "DecodeFailure") yield* Effect.logWarning(`undecodable delivery (${outcome.error.reason}): ${outcome.error.message}; ${decision}`)
        else if (outcome._tag === "DeliveryLimit") yield* Effect.logWarning(`delivered ${attempt} times (limit ${maxAttempts}); ${decision}`)
        else if (outcome._tag === "Failure" && decision === "dead-letter") yield* Effect.logWarning("handler failed; dead-lettering", outcome.error)
        yield* settle(item, decision, outcome, attempt)
      }).pipe(
        Effect.withSpan("tidings.consumer.handle", {
          kind: "consumer",
          ...(parent === undefined ? {} : { parent }),
          attributes: {
            "messaging.system": "rabbitmq",
            "messaging.destination.name": queue,
            "messaging.consumer.group.name": config.name,
            "tidings.consumer.attempt": attempt,
            ...(messageId === undefined ? {} : { "messaging.message.id": messageId }),
            ...(eventType === undefined ? {} : { "tidings.event.type": eventType })
          }
        }, noStack),
        Effect.onInterrupt(() => settle(item, decide({ _tag: "Shutdown" }, attempt), { _tag: "Shutdown" }, attempt)),
        Effect.annotateLogs({ messageId: messageId ?? "", eventType: eventType ?? "" })
      )
    }

    const worker = Effect.gen(function*() {
      while (true) {
        const item = yield* Queue.take(inbox)
        // A delivery of a channel that is gone was requeued by the broker already.
        if (item.channel !== openChannel) continue
        inFlight++
        yield* handle(item).pipe(Effect.ensuring(Effect.sync(() => void inFlight--)))
      }
    }).pipe(Pull.catchDone(() => Effect.void), annotate)

    const workers = yield* Effect.forEach(Array.from({ length: concurrency }), () => Effect.forkScoped(worker))

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        stopping = true
        const current = consuming
        consuming = undefined
        if (current !== undefined) {
          yield* Effect.promise(() => current.channel.cancel(current.tag).catch(() => undefined)).pipe(Effect.timeoutOption("5 seconds"))
        }
        const notStarted = yield* Queue.clear(inbox)
        for (const item of notStarted) {
          if (item.channel !== openChannel) continue
          yield* settle(item, decide({ _tag: "Shutdown" }, attemptOf(item.message)), { _tag: "Shutdown" }, attemptOf(item.message))
        }
        yield* Queue.end(inbox)
        const finished = yield* Fiber.awaitAll(workers).pipe(Effect.timeoutOption(shutdownMs))
        if (Option.isNone(finished)) {
          yield* Effect.logWarning(`consumer shutdown: handlers still running after ${shutdownMs} ms; interrupting them (their deliveries are requeued)`)
          yield* Fiber.interruptAll(workers)
        }
      }).pipe(annotate)
    )

    return {
      name: config.name,
      queue,
      isConsuming: Effect.sync(() => consuming !== undefined && !stopping),
      inFlight: Effect.sync(() => inFlight)
    } satisfies Service
  })

/** A consumer that lives as long as the layer (many consumers: merge their layers). */
export const layer = <A, E, R>(
  config: Config<A, E, R>
): Layer.Layer<never, AmqpConfigError | AmqpConnectionError | TopologyError, AmqpConnection | R> =>
  Layer.effectDiscard(make(config))
