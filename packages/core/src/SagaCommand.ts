/**
 * The command/reply protocol of asynchronous sagas, as participants see it: a saga's command is an
 * ordinary event carrying {@link CommandHeaders}; a participant reads it with {@link commandOf},
 * does the work, and answers with {@link reply} ({@link completed} or {@link failed}) in the same
 * transaction as its own changes. The orchestrator hands the {@link ReplyEvent} to
 * `Saga.handleReply`. `Saga` re-exports everything here.
 * @since 0.1.0
 * @module
 */
import { type Effect, Option, Schema } from "effect"
import type { InvalidEvent, NotInTransaction, StoreError } from "./Errors.ts"
import * as Event from "./Event.ts"
import type { Message } from "./Message.ts"
import * as Outbox from "./Outbox.ts"
import type { OutboxStore } from "./OutboxStore.ts"

/**
 * Headers that mark a command event as a saga's; {@link commandOf} reads them.
 * @since 0.1.0
 * @category constants
 */
export const CommandHeaders = {
  sagaId: "tidings-saga-id",
  sagaType: "tidings-saga-type",
  step: "tidings-saga-step",
  stepName: "tidings-saga-step-name",
  kind: "tidings-saga-kind",
  attempt: "tidings-saga-attempt"
} as const

/**
 * A command: the action of a step, or its compensation.
 * @since 0.1.0
 * @category models
 */
export type CommandKind = "action" | "compensation"

/**
 * The payload of a reply event.
 * @since 0.1.0
 * @category schemas
 */
export const ReplyPayload: Schema.Struct<{
  readonly sagaId: Schema.String
  readonly sagaType: Schema.String
  readonly step: Schema.Int
  readonly stepName: Schema.String
  readonly kind: Schema.Literals<readonly ["action", "compensation"]>
  readonly attempt: Schema.Int
  readonly outcome: Schema.Literals<readonly ["completed", "failed"]>
  /** The step's result, encoded (JSON), for a completed action. */
  readonly result: Schema.optionalKey<Schema.Unknown>
  readonly error: Schema.optionalKey<Schema.String>
  /** For a failed compensation: false when retrying cannot help. */
  readonly retryable: Schema.optionalKey<Schema.Boolean>
}> = Schema.Struct({
  sagaId: Schema.String,
  sagaType: Schema.String,
  step: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  stepName: Schema.String,
  kind: Schema.Literals(["action", "compensation"]),
  attempt: Schema.Int,
  outcome: Schema.Literals(["completed", "failed"]),
  /** The step's result, encoded (JSON), for a completed action. */
  result: Schema.optionalKey(Schema.Unknown),
  error: Schema.optionalKey(Schema.String),
  /** For a failed compensation: false when retrying cannot help. */
  retryable: Schema.optionalKey(Schema.Boolean)
})

/**
 * @since 0.1.0
 * @category models
 */
export type ReplyPayload = typeof ReplyPayload.Type

/**
 * The reply event type: participants append it, the orchestrator's consumer hands it to `Saga.handleReply`.
 * @since 0.1.0
 * @category events
 */
export const ReplyEvent: Event.EventType<"tidings.saga.reply", typeof ReplyPayload> = Event.define(
  "tidings.saga.reply",
  { aggregateType: "saga", schema: ReplyPayload }
)

/**
 * What sagas read of a received message: its id, event type, decoded payload and headers. Any
 * `Consumer.Delivery` fits (a core `Message` from the in-memory broker, a RabbitMQ delivery), as
 * does any object with these fields.
 * @since 0.1.0
 * @category models
 */
export interface Received {
  readonly id?: string | undefined
  readonly type: string
  readonly payload: unknown
  readonly headers: Readonly<Record<string, unknown>>
}

/**
 * A saga command as a participant receives it.
 * @since 0.1.0
 * @category models
 */
export interface Command<M extends Received = Received> {
  readonly sagaId: string
  readonly sagaType: string
  readonly step: number
  readonly stepName: string
  readonly kind: CommandKind
  readonly attempt: number
  /** `<sagaId>/<step>` for actions, `<sagaId>/<step>/compensation` for compensations. */
  readonly idempotencyKey: string
  readonly message: M
}

/**
 * The saga command a message carries, if it is one.
 * @since 0.1.0
 * @category accessors
 */
export const commandOf = <M extends Received>(message: M): Option.Option<Command<M>> => {
  const header = (name: string): string | undefined => {
    const value = message.headers[name]
    return typeof value === "string" ? value : typeof value === "number" ? String(value) : undefined
  }
  const sagaId = header(CommandHeaders.sagaId)
  const sagaType = header(CommandHeaders.sagaType)
  const step = Number(header(CommandHeaders.step))
  const stepName = header(CommandHeaders.stepName)
  const kind = header(CommandHeaders.kind)
  const attempt = Number(header(CommandHeaders.attempt) ?? "1")
  if (
    sagaId === undefined || sagaType === undefined || stepName === undefined || !Number.isInteger(step) ||
    (kind !== "action" && kind !== "compensation")
  ) {
    return Option.none()
  }
  return Option.some({
    sagaId,
    sagaType,
    step,
    stepName,
    kind,
    attempt: Number.isInteger(attempt) ? attempt : 1,
    idempotencyKey: kind === "action" ? `${sagaId}/${stepName}` : `${sagaId}/${stepName}/compensation`,
    message
  })
}

/**
 * What a participant answers.
 * @since 0.1.0
 * @category models
 */
export type Outcome =
  | { readonly _tag: "Completed"; readonly result?: unknown }
  | { readonly _tag: "Failed"; readonly error: string; readonly retryable?: boolean }

/**
 * The command was carried out; `result` is the step's result, encoded as its schema expects (JSON).
 * @since 0.1.0
 * @category constructors
 */
export const completed = (result?: unknown): Outcome =>
  result === undefined ? { _tag: "Completed" } : { _tag: "Completed", result }

/**
 * The command failed. A failed action compensates the saga at once. A failed compensation is sent
 * again by its retry schedule unless `retryable: false` says that retrying cannot help (the reply
 * is the participant's explicit answer, so it is retried when it says nothing).
 * @since 0.1.0
 * @category constructors
 */
export const failed = (error: string, options: { readonly retryable?: boolean } = {}): Outcome =>
  options.retryable === undefined ? { _tag: "Failed", error } : { _tag: "Failed", error, retryable: options.retryable }

/**
 * A participant's answer to a command: appends the reply event in the current transaction (the one
 * holding the participant's own changes), so that the reply is sent if and only if they commit.
 * @since 0.1.0
 * @category combinators
 */
export const reply = (
  command: Command<Received>,
  outcome: Outcome
): Effect.Effect<Message, InvalidEvent | NotInTransaction | StoreError, OutboxStore> =>
  Outbox.append(ReplyEvent, {
    aggregateId: command.sagaId,
    payload: {
      sagaId: command.sagaId,
      sagaType: command.sagaType,
      step: command.step,
      stepName: command.stepName,
      kind: command.kind,
      attempt: command.attempt,
      outcome: outcome._tag === "Completed" ? "completed" : "failed",
      ...(outcome._tag === "Completed" && outcome.result !== undefined ? { result: outcome.result } : {}),
      ...(outcome._tag === "Failed" ? { error: outcome.error } : {}),
      ...(outcome._tag === "Failed" && outcome.retryable !== undefined ? { retryable: outcome.retryable } : {})
    }
  })

/**
 * What `Saga.handleReply` (or a recovery round) did with a saga.
 * @since 0.1.0
 * @category models
 */
export type ReplyOutcome =
  /** The next step's command was sent. */
  | "advanced"
  /** Every step completed. */
  | "completed"
  /** A compensation command was sent. */
  | "compensating"
  /** Every completed step is compensated. */
  | "compensated"
  /** A compensation will be sent again after its retry delay. */
  | "retrying"
  /** A compensation kept failing: the saga is `failed`. */
  | "failed"
  /** A reply that came after its step timed out: recorded, and the step compensated. */
  | "late"
  /** Not a reply this saga waits for (a duplicate, or for a step already settled): nothing changed. */
  | "ignored"
