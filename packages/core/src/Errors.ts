/**
 * The failure families of Tidings. Each is a `Schema.TaggedError`, so it can be logged, encoded and
 * sent over the wire, and each has an `isRetryable` view that the engines use to choose between
 * retrying, backing off and dead-lettering (never the message text).
 * @module
 */
import { Schema } from "effect"

/** One problem found while validating an event payload, with the path into the payload. */
export const Issue = Schema.Struct({ path: Schema.Array(Schema.Unknown), message: Schema.String })
export type Issue = typeof Issue.Type

/** An appended event failed its schema (or is not JSON). Nothing was written. */
export class InvalidEvent extends Schema.TaggedError<InvalidEvent>()("InvalidEvent", {
  eventType: Schema.String,
  version: Schema.Int,
  message: Schema.String,
  issues: Schema.Array(Issue)
}) {
  /** A payload that fails its schema fails again: never retried. */
  get isRetryable(): boolean {
    return false
  }
}

/** `Outbox.append` was called outside a transaction; it never opens one of its own. */
export class NotInTransaction extends Schema.TaggedError<NotInTransaction>()("NotInTransaction", {
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/** A storage operation failed (database unreachable, deadlock, constraint, ...). */
export class StoreError extends Schema.TaggedError<StoreError>()("StoreError", {
  operation: Schema.String,
  message: Schema.String,
  retryable: Schema.Boolean,
  cause: Schema.optional(Schema.Defect())
}) {
  /** Connection loss, timeouts, deadlocks and serialization failures are worth another try. */
  get isRetryable(): boolean {
    return this.retryable
  }
}

/**
 * A message could not be published (broker refused it, timed out, connection lost, ...).
 * `retryAfter`: the receiver asked to wait at least this long (an HTTP `Retry-After`); the relay
 * retries no earlier, whatever its schedule says.
 */
export class PublishError extends Schema.TaggedError<PublishError>()("PublishError", {
  reason: Schema.String,
  retryable: Schema.Boolean,
  retryAfter: Schema.optional(Schema.Duration),
  cause: Schema.optional(Schema.Defect())
}) {
  get isRetryable(): boolean {
    return this.retryable
  }
}

/** Configuration that cannot work (a batch size of 0, a lease shorter than zero, a bad schema name). */
export class InvalidConfig extends Schema.TaggedError<InvalidConfig>()("InvalidConfig", {
  path: Schema.String,
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * Whether a handler's error is transient (worth another delivery): its `isRetryable` (or
 * `retryable`) says so, or it is an Effect timeout. An error that says nothing is permanent: a
 * business rule or a decode failure would fail the same way again. Every consumer uses this rule.
 */
export const isRetryable = (error: unknown): boolean => {
  if (typeof error !== "object" || error === null) return false
  const e = error as { readonly isRetryable?: unknown; readonly retryable?: unknown; readonly _tag?: unknown }
  if (typeof e.isRetryable === "boolean") return e.isRetryable
  if (typeof e.retryable === "boolean") return e.retryable
  return e._tag === "TimeoutError"
}
