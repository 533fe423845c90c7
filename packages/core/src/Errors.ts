/**
 * The failure families of Tidings. Each is a `Schema.TaggedError`, so it can be logged, encoded and
 * sent over the wire. Store and publish errors carry a tagged `reason` (as `effect/sql`'s `SqlError`
 * does); every error has an `isRetryable` view, and `isRetryable(error)` below is the one rule the
 * engines use to choose between retrying, backing off and dead-lettering (never the message text).
 * `isUnavailable(error)` tells "the database or broker cannot be reached" apart from "this message
 * failed": unavailability pauses work and counts no attempt.
 * @since 0.1.0
 * @module
 */
import { Cause, Duration, Option, Result, Schema } from "effect"

/**
 * One problem found while validating an event payload or a configuration, with the path into it.
 * @since 0.1.0
 * @category models
 */
export const Issue: Schema.Struct<{
  readonly path: Schema.$Array<Schema.Unknown>
  readonly message: Schema.String
}> = Schema.Struct({ path: Schema.Array(Schema.Unknown), message: Schema.String })
/**
 * @since 0.1.0
 * @category models
 */
export type Issue = typeof Issue.Type

const InvalidEventBase: Schema.Class<
  InvalidEvent,
  Schema.TaggedStruct<"InvalidEvent", {
    readonly eventType: Schema.String
    readonly version: Schema.Int
    readonly message: Schema.String
    readonly issues: Schema.$Array<typeof Issue>
  }>,
  Cause.YieldableError
> = Schema.TaggedError<InvalidEvent>()("InvalidEvent", {
  eventType: Schema.String,
  version: Schema.Int,
  message: Schema.String,
  issues: Schema.Array(Issue)
})

/**
 * An appended event failed its schema (or is not JSON). Nothing was written.
 * @since 0.1.0
 * @category errors
 */
export class InvalidEvent extends InvalidEventBase {
  /** A payload that fails its schema fails again: never retried. */
  get isRetryable(): boolean {
    return false
  }
}

const NotInTransactionBase: Schema.Class<
  NotInTransaction,
  Schema.TaggedStruct<"NotInTransaction", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<NotInTransaction>()("NotInTransaction", {
  message: Schema.String
})

/**
 * `Outbox.append` was called outside a transaction; it never opens one of its own.
 * @since 0.1.0
 * @category errors
 */
export class NotInTransaction extends NotInTransactionBase {
  get isRetryable(): boolean {
    return false
  }
}

// ---------------------------------------------------------------------------------------------
// Reasons shared by store and publish errors
// ---------------------------------------------------------------------------------------------

const UnavailableBase: Schema.Class<Unavailable, Schema.TaggedStruct<"Unavailable", {}>, {}> = Schema.TaggedClass<
  Unavailable
>()("Unavailable", {})

/**
 * The database or broker cannot be reached: refused, lost, closed, terminated, blocked, shutting
 * down. Retryable, and not a failure of the work itself: engines pause instead of counting attempts.
 * @since 0.1.0
 * @category reasons
 */
export class Unavailable extends UnavailableBase {
  get isRetryable(): boolean {
    return true
  }
}

const TimeoutBase: Schema.Class<Timeout, Schema.TaggedStruct<"Timeout", {}>, {}> = Schema.TaggedClass<Timeout>()(
  "Timeout",
  {}
)

/**
 * The operation did not finish in time (a statement timeout, a confirm or response that did not
 * come). Retryable.
 * @since 0.1.0
 * @category reasons
 */
export class Timeout extends TimeoutBase {
  get isRetryable(): boolean {
    return true
  }
}

const ContentionBase: Schema.Class<Contention, Schema.TaggedStruct<"Contention", {}>, {}> = Schema.TaggedClass<
  Contention
>()("Contention", {})

/**
 * Concurrent work got in the way: a deadlock, a serialization failure, a lock timeout, a lost
 * compare-and-set. Retryable.
 * @since 0.1.0
 * @category reasons
 */
export class Contention extends ContentionBase {
  get isRetryable(): boolean {
    return true
  }
}

const RejectedBase: Schema.Class<Rejected, Schema.TaggedStruct<"Rejected", {}>, {}> = Schema.TaggedClass<Rejected>()(
  "Rejected",
  {}
)

/**
 * The store refused the data: a constraint or unique violation, a value it cannot hold. Trying the
 * same again fails the same way.
 * @since 0.1.0
 * @category reasons
 */
export class Rejected extends RejectedBase {
  get isRetryable(): boolean {
    return false
  }
}

const RefusedBase: Schema.Class<
  Refused,
  Schema.TaggedStruct<"Refused", {
    readonly retryable: Schema.Boolean
    readonly status: Schema.optional<Schema.Number>
    readonly retryAfterMs: Schema.optional<Schema.Number>
  }>,
  {}
> = Schema.TaggedClass<Refused>()("Refused", {
  retryable: Schema.Boolean,
  status: Schema.optional(Schema.Number),
  retryAfterMs: Schema.optional(Schema.Number)
})

/**
 * The broker or receiver answered and refused this message (a nack, an unroutable return, an HTTP
 * error status). `retryable` says whether another attempt may succeed; `retryAfter` (milliseconds)
 * is the earliest the peer asked to be tried again (HTTP `Retry-After`).
 * @since 0.1.0
 * @category reasons
 */
export class Refused extends RefusedBase {
  get isRetryable(): boolean {
    return this.retryable
  }
}

const InvalidBase: Schema.Class<Invalid, Schema.TaggedStruct<"Invalid", {}>, {}> = Schema.TaggedClass<Invalid>()(
  "Invalid",
  {}
)

/**
 * The message cannot be sent as it is (it does not encode, it is too large). Never retried.
 * @since 0.1.0
 * @category reasons
 */
export class Invalid extends InvalidBase {
  get isRetryable(): boolean {
    return false
  }
}

const UnknownBase: Schema.Class<
  Unknown,
  Schema.TaggedStruct<"Unknown", {
    readonly retryable: Schema.Boolean
  }>,
  {}
> = Schema.TaggedClass<Unknown>()("Unknown", { retryable: Schema.Boolean })

/**
 * Something the driver could not classify. `retryable` carries the driver's own judgement.
 * @since 0.1.0
 * @category reasons
 */
export class Unknown extends UnknownBase {
  get isRetryable(): boolean {
    return this.retryable
  }
}

/**
 * Why a storage operation failed.
 * @since 0.1.0
 * @category reasons
 */
export const StoreErrorReason: Schema.Union<
  readonly [typeof Unavailable, typeof Timeout, typeof Contention, typeof Rejected, typeof Unknown]
> = Schema.Union([Unavailable, Timeout, Contention, Rejected, Unknown])
/**
 * @since 0.1.0
 * @category reasons
 */
export type StoreErrorReason = typeof StoreErrorReason.Type

/**
 * Why a publish failed.
 * @since 0.1.0
 * @category reasons
 */
export const PublishErrorReason: Schema.Union<
  readonly [typeof Unavailable, typeof Timeout, typeof Refused, typeof Invalid, typeof Unknown]
> = Schema.Union([Unavailable, Timeout, Refused, Invalid, Unknown])
/**
 * @since 0.1.0
 * @category reasons
 */
export type PublishErrorReason = typeof PublishErrorReason.Type

const StoreErrorBase: Schema.Class<
  StoreError,
  Schema.TaggedStruct<"StoreError", {
    readonly operation: Schema.String
    readonly message: Schema.String
    readonly reason: Schema.Union<
      readonly [typeof Unavailable, typeof Timeout, typeof Contention, typeof Rejected, typeof Unknown]
    >
    readonly cause: Schema.optional<Schema.Defect>
  }>,
  Cause.YieldableError
> = Schema.TaggedError<StoreError>()("StoreError", {
  operation: Schema.String,
  message: Schema.String,
  reason: StoreErrorReason,
  cause: Schema.optional(Schema.Defect())
})

/**
 * A storage operation failed (database unreachable, deadlock, constraint, ...).
 * @since 0.1.0
 * @category errors
 */
export class StoreError extends StoreErrorBase {
  /** Unavailability, timeouts, deadlocks and serialization failures are worth another try. */
  get isRetryable(): boolean {
    return this.reason.isRetryable
  }
  /** The database could not be reached: pause, don't count it against the work. */
  get isUnavailable(): boolean {
    return this.reason._tag === "Unavailable"
  }
}

const PublishErrorBase: Schema.Class<
  PublishError,
  Schema.TaggedStruct<"PublishError", {
    readonly message: Schema.String
    readonly reason: Schema.Union<
      readonly [typeof Unavailable, typeof Timeout, typeof Refused, typeof Invalid, typeof Unknown]
    >
    readonly cause: Schema.optional<Schema.Defect>
  }>,
  Cause.YieldableError
> = Schema.TaggedError<PublishError>()("PublishError", {
  message: Schema.String,
  reason: PublishErrorReason,
  cause: Schema.optional(Schema.Defect())
})

/**
 * A message could not be published (broker unreachable, refused, timed out, ...).
 * @since 0.1.0
 * @category errors
 */
export class PublishError extends PublishErrorBase {
  get isRetryable(): boolean {
    return this.reason.isRetryable
  }
  /** The broker or endpoint could not be reached: not a failure of this message. */
  get isUnavailable(): boolean {
    return this.reason._tag === "Unavailable"
  }
  /** The earliest time the peer asked to be tried again, if it said. */
  get retryAfter(): Option.Option<Duration.Duration> {
    return this.reason._tag === "Refused" && this.reason.retryAfterMs !== undefined
      ? Option.some(Duration.millis(this.reason.retryAfterMs))
      : Option.none()
  }
}

const InvalidConfigBase: Schema.Class<
  InvalidConfig,
  Schema.TaggedStruct<"InvalidConfig", {
    readonly path: Schema.String
    readonly message: Schema.String
    readonly issues: Schema.optional<
      Schema.$Array<
        Schema.Struct<{
          readonly path: Schema.String
          readonly message: Schema.String
        }>
      >
    >
  }>,
  Cause.YieldableError
> = Schema.TaggedError<InvalidConfig>()("InvalidConfig", {
  path: Schema.String,
  message: Schema.String,
  issues: Schema.optional(Schema.Array(Schema.Struct({ path: Schema.String, message: Schema.String })))
})

/**
 * Configuration that cannot work (a batch size of 0, a lease shorter than zero, a bad schema name, a
 * missing environment variable). `issues` lists every problem found, each with its path; `path` and
 * `message` summarise them.
 * @since 0.1.0
 * @category errors
 */
export class InvalidConfig extends InvalidConfigBase {
  get isRetryable(): boolean {
    return false
  }
}

// ---------------------------------------------------------------------------------------------
// The rules
// ---------------------------------------------------------------------------------------------

/**
 * Whether an error is transient (worth another try): its own `isRetryable` (or `retryable`) says
 * so, or it is an Effect timeout. An error that says nothing is permanent: a business rule or a
 * decode failure would fail the same way again, so it is not retried (say `isRetryable` on an error
 * class to have it retried). Every engine uses this rule: relays, consumers, sagas, HTTP commands.
 * @since 0.1.0
 * @category predicates
 */
export const isRetryable = (error: unknown): boolean => {
  if (typeof error !== "object" || error === null) return false
  const e = error as { readonly isRetryable?: unknown; readonly retryable?: unknown; readonly _tag?: unknown }
  if (typeof e.isRetryable === "boolean") return e.isRetryable
  if (typeof e.retryable === "boolean") return e.retryable
  return e._tag === "TimeoutError"
}

/**
 * Whether an error says that a database or broker could not be reached (its `isUnavailable`). Work
 * that fails this way is paused and retried without counting an attempt.
 * @since 0.1.0
 * @category predicates
 */
export const isUnavailable = (error: unknown): boolean =>
  typeof error === "object" && error !== null && (error as { readonly isUnavailable?: unknown }).isUnavailable === true

const transientSocketCodes: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN"
])

/**
 * Whether a socket error code (Node, Deno and Bun use the same) says the peer could not be reached
 * or went away: a new connection may well succeed. The drivers read their clients' errors with it.
 * @since 0.1.0
 * @category predicates
 */
export const isTransientSocketCode = (code: string): boolean => transientSocketCodes.has(code)

const maxText = 2000

/**
 * A one-line description of any error, for logs and stored failure reasons: `Tag: message`, a
 * tagged error's fields when it has no message, or its text. Bounded to 2,000 characters.
 * @since 0.1.0
 * @category formatting
 */
export const describe = (error: unknown): string => {
  const text = describeUnbounded(error)
  return text.length > maxText ? `${text.slice(0, maxText)}…` : text
}

const describeUnbounded = (error: unknown): string => {
  if (typeof error === "object" && error !== null) {
    const e = error as { readonly _tag?: unknown; readonly message?: unknown; readonly name?: unknown }
    const tag = typeof e._tag === "string" ? e._tag : undefined
    const message = typeof e.message === "string" && e.message !== "" ? e.message : undefined
    if (tag !== undefined && message !== undefined) return `${tag}: ${message}`
    if (tag !== undefined) {
      // A tagged error without a message: its fields say what happened.
      try {
        const { _tag, ...fields } = error as Record<string, unknown>
        return Object.keys(fields).length === 0 ? tag : `${tag} ${JSON.stringify(fields)}`
      } catch {
        return tag
      }
    }
    if (message !== undefined) {
      return error instanceof Error && error.name !== "Error" ? `${error.name}: ${message}` : message
    }
  }
  return String(error)
}

/**
 * A one-line description of a failure `Cause`: its first typed error, else its first defect, else
 * "interrupted".
 * @since 0.1.0
 * @category formatting
 */
export const describeCause = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.findErrorOption(cause)
  if (Option.isSome(error)) return describe(error.value)
  const defect = Cause.findDefect(cause)
  if (Result.isSuccess(defect)) return describe(defect.success)
  return Cause.hasInterrupts(cause) ? "interrupted" : describe(Cause.squash(cause))
}
