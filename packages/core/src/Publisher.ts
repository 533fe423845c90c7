/**
 * The publishing port: where the relay sends claimed events. Only a confirmed publish counts; the
 * relay marks an event published after its `Published` result and nothing else. A publisher that
 * cannot reach its broker fails with a `PublishError` whose reason is `Unavailable` (not a failure
 * of the message) and says when it is back through `awaitAvailable`.
 * @since 0.1.0
 * @module
 */
import { Context, type Effect } from "effect"
import type { PublishError } from "./Errors.ts"
import type { Message } from "./Message.ts"
import type { Destination } from "./Tracing.ts"

/**
 * The per-message outcome of a batch publish.
 * @since 0.1.0
 * @category models
 */
export type PublishResult =
  | { readonly _tag: "Published"; readonly id: string }
  | { readonly _tag: "Rejected"; readonly id: string; readonly error: PublishError }

/**
 * The publisher service.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /**
   * Publishes a batch and waits for the broker's confirms. A failure of the whole batch (connection
   * lost) may be returned as the error instead of one `Rejected` per message.
   */
  readonly publish: (messages: ReadonlyArray<Message>) => Effect.Effect<ReadonlyArray<PublishResult>, PublishError>
  /**
   * Completes at once while the publisher can take messages, otherwise when it can again (the
   * broker reconnected, a resource alarm cleared). Relays wait on it before claiming, so an outage
   * is a pause that counts no attempts. Omitted: always available.
   */
  readonly awaitAvailable?: Effect.Effect<void>
  /** Where it sends, for the relay's `send` spans (OpenTelemetry messaging conventions). */
  readonly destination?: Destination
}

const PublisherBase: Context.ServiceClass<Publisher, "@tidings/core/Publisher", Service> = Context.Service<
  Publisher,
  Service
>()("@tidings/core/Publisher")

/**
 * The publisher the relay uses.
 * @since 0.1.0
 * @category services
 */
export class Publisher extends PublisherBase {}

/**
 * A confirmed publish.
 * @since 0.1.0
 * @category constructors
 */
export const published = (id: string): PublishResult => ({ _tag: "Published", id })

/**
 * A rejected publish.
 * @since 0.1.0
 * @category constructors
 */
export const rejected = (id: string, error: PublishError): PublishResult => ({ _tag: "Rejected", id, error })
