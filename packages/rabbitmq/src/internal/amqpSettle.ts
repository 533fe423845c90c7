// Carrying out a consumer's decision on RabbitMQ: ack, dead-letter (nack without requeue: the queue's
// dead-letter exchange takes it), requeue, or a retry: a copy with the attempt count published with
// a confirm to a retry queue (or back to a classic work queue), and only then the original acked.
import * as Consumer from "@tidings/core/Consumer"
import type { Channel, ConsumeMessage, MessageProperties } from "amqplib"
import { Effect, Metric } from "effect"
import type * as Topology from "../Topology.ts"
import { attemptOf, str } from "./amqpDecode.ts"
import type { ConfirmPublisher } from "./confirmPublisher.ts"
import { brokerHeaders, copiedProperties, HeaderNames } from "./headers.ts"

/** A delivery and the channel it came on (acks go to that channel, or nowhere). */
export interface Item {
  readonly message: ConsumeMessage
  readonly channel: Channel
}

const copyProperties = (properties: MessageProperties, messageId: string, headers: Record<string, unknown>) => ({
  messageId,
  persistent: true,
  mandatory: true,
  headers,
  ...copiedProperties(properties),
  ...(properties.replyTo == null ? {} : { replyTo: String(properties.replyTo) }),
  ...(properties.priority == null ? {} : { priority: Number(properties.priority) })
})

export interface SettleOptions {
  /** The consumer's name: the `consumer` attribute of the metrics. */
  readonly name: string
  readonly queue: string
  readonly queueType: "quorum" | "classic" | undefined
  readonly retryMode: "delayed" | "requeue"
  readonly retryQueues: ReadonlyArray<Topology.RetryQueue>
  readonly retries: ConfirmPublisher
  readonly retryConfirmMs: number
}

/** `settle(item)` carries out a decision for one delivery (see `Consumer.Incoming.settle`). */
export const makeSettle = (options: SettleOptions) => {
  const attrs = { consumer: options.name }
  const count = (metric: Metric.Counter<number>, extra: Record<string, string> = {}) =>
    Metric.update(Metric.withAttributes(metric, { ...attrs, ...extra }), 1)
  const metrics = Consumer.metrics

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

  const requeue = (item: Item, mode: string) =>
    Effect.flatMap(
      onChannel(item, (ch) => ch.nack(item.message, false, true)),
      (ok) => ok ? count(metrics.retried, { mode }) : Effect.void
    )

  /** Publishes a copy (with the attempt count) to `routingKey` via the default exchange, then acks the original. */
  const republish = (item: Item, routingKey: string, attempt: number, mode: string) =>
    Effect.gen(function*() {
      const { message } = item
      const headers: Record<string, unknown> = {}
      for (const [k, v] of Object.entries(message.properties.headers ?? {})) if (!brokerHeaders.has(k)) headers[k] = v
      headers[HeaderNames.attempt] = attempt
      const messageId = str(message.properties.messageId) ?? crypto.randomUUID()
      const published = yield* options.retries.publish([{
        exchange: "",
        routingKey,
        content: message.content,
        options: copyProperties(message.properties, messageId, headers)
      }], options.retryConfirmMs).pipe(Effect.result)
      const outcome = published._tag === "Success" ? published.success[0] : undefined
      if (outcome?._tag === "Confirmed") {
        // The copy is safe; if this ack is lost the original comes back too (at-least-once).
        yield* onChannel(item, (ch) => ch.ack(message))
        return yield* count(metrics.retried, { mode })
      }
      const why = published._tag === "Failure"
        ? published.failure.message
        : outcome?._tag === "Failed"
        ? outcome.reason
        : "no outcome"
      yield* Effect.logWarning(`retry copy to ${routingKey} failed (${why}); requeueing instead`)
      return yield* requeue(item, "requeue")
    })

  return (item: Item) => (decision: Consumer.Decision, outcome: Consumer.Outcome<unknown>): Effect.Effect<void> =>
    Effect.gen(function*() {
      const { message } = item
      switch (decision) {
        case "ack":
          if (yield* onChannel(item, (ch) => ch.ack(message))) yield* count(metrics.acked)
          return
        case "dead-letter":
          if (yield* onChannel(item, (ch) => ch.nack(message, false, false))) {
            yield* count(metrics.deadLettered, { reason: Consumer.label(outcome) })
          }
          return
        case "requeue":
          return yield* requeue(item, outcome._tag === "Shutdown" ? "shutdown" : "requeue")
        case "retry": {
          const n = attemptOf(message)
          if (options.retryMode === "delayed") {
            const target = options.retryQueues[Math.min(n, options.retryQueues.length) - 1]!
            return yield* republish(item, target.name, n, "delayed")
          }
          // Quorum queues count redeliveries (x-delivery-count) so a requeue is enough; a classic
          // queue only says "redelivered", so its copy goes back with our own attempt count.
          const headers = message.properties.headers ?? {}
          const counted = options.queueType === "quorum" ||
            (options.queueType === undefined &&
              (headers["x-delivery-count"] !== undefined || !message.fields.redelivered))
          return yield* (counted ? requeue(item, "requeue") : republish(item, options.queue, n, "requeue"))
        }
      }
    })
}
