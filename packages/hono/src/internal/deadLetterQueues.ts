/**
 * The console's port to a broker's dead-letter queues (re-exported by `Console`): here, so that the
 * console's API module and `Console` both use it without importing each other.
 * @module
 */
import type { Effect } from "effect"

/**
 * A broker dead-letter queue.
 * @since 0.1.0
 * @category models
 */
export interface DeadLetterQueue {
  /** The dead-letter queue (e.g. `orders.billing.dlq`). */
  readonly name: string
  /** The work queue its messages are replayed into. */
  readonly target: string
  /** Messages waiting in it. */
  readonly messages: number
  /** Consumers attached to the work queue, when the broker says. */
  readonly consumers?: number
}

/**
 * A message in a dead-letter queue, as far as the broker tells.
 * @since 0.1.0
 * @category models
 */
export interface DeadLetterMessage {
  readonly messageId: string | null
  readonly type: string | null
  /** Why it was dead-lettered (`rejected`, `delivery_limit`, ...) and from where. */
  readonly reason: string | null
  readonly headers: Readonly<Record<string, unknown>>
  /** The body as text (cut to a few kilobytes). */
  readonly body: string
}

/**
 * The port to a broker's dead-letter queues: list them, look at their messages without taking
 * them, and move messages back to their work queue. `@tidings/rabbitmq`'s `DeadLetters` implements
 * it; errors are reported as JSON errors (a broker that is down answers 503).
 * @since 0.1.0
 * @category models
 */
export interface DeadLetterQueues<R = never> {
  readonly list: Effect.Effect<ReadonlyArray<DeadLetterQueue>, unknown, R>
  readonly peek: (queue: string, limit: number) => Effect.Effect<ReadonlyArray<DeadLetterMessage>, unknown, R>
  /** Moves up to `limit` messages (all without one) back to the work queue; returns how many. */
  readonly replay: (queue: string, options?: { readonly limit?: number }) => Effect.Effect<number, unknown, R>
}
