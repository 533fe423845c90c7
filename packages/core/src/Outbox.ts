/**
 * Appending events to the transactional outbox. `append` writes in the caller's open transaction,
 * next to the business change, and never opens one of its own: the events commit or roll back with
 * the change. Relays publish them after the commit: a relay running in this process on the same
 * store gets them at once (eager dispatch: written already claimed for it, handed over after the
 * commit; the two find each other through the `EagerDispatch` registry that the store's layer
 * provides); otherwise they are written pending and relays claim them, woken after the commit.
 * @since 0.1.0
 * @module
 */
import { Clock, Effect, Option, Schema, SchemaIssue } from "effect"
import * as EagerDispatch from "./EagerDispatch.ts"
import { InvalidEvent, type NotInTransaction, type StoreError } from "./Errors.ts"
import type { EventDraft, EventInput, EventType } from "./Event.ts"
import * as MessagingSpans from "./internal/messagingSpans.ts"
import { uuidv7 } from "./internal/uuid.ts"
import { HeaderNames, Message } from "./Message.ts"
import { OutboxStore } from "./OutboxStore.ts"
import * as Tracing from "./Tracing.ts"
import { Wakeups } from "./Wakeup.ts"

/**
 * What `append` can fail with.
 * @since 0.1.0
 * @category errors
 */
export type AppendError = InvalidEvent | NotInTransaction | StoreError

const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()
const validateMessage = Schema.decodeUnknownExit(Message)

const invalid = (draft: EventDraft, message: string, issues: InvalidEvent["issues"] = []) =>
  new InvalidEvent({ eventType: draft.eventType.type, version: draft.eventType.version, message, issues })

/**
 * Validates and encodes one draft into a message; fails without side effects.
 * @since 0.1.0
 * @category encoding
 */
export const encode = (
  draft: EventDraft,
  now: number,
  traceparent: Option.Option<string>
): Effect.Effect<Message, InvalidEvent> =>
  Effect.gen(function*() {
    const { eventType } = draft
    const encoded = Schema.encodeUnknownEffect(eventType.schema)(draft.payload) as Effect.Effect<
      unknown,
      Schema.SchemaError
    >
    const payload = yield* encoded.pipe(
      Effect.mapError((e) => {
        const { issues } = formatIssues(e.issue)
        return invalid(
          draft,
          `${eventType.type} v${eventType.version}: ${e.message}`,
          issues.map((i) => ({ path: [...(i.path ?? [])], message: i.message }))
        )
      })
    )
    // The payload is stored as jsonb and sent as JSON: it must survive a round trip unchanged.
    let json: string | undefined
    try {
      json = JSON.stringify(payload)
    } catch (cause) {
      return yield* invalid(
        draft,
        `${eventType.type} v${eventType.version}: payload is not JSON-serializable (${String(cause)})`
      )
    }
    if (json === undefined) {
      return yield* invalid(draft, `${eventType.type} v${eventType.version}: payload encodes to nothing`)
    }
    const headers: Record<string, string> = { ...draft.headers }
    if (Option.isSome(traceparent) && headers[HeaderNames.traceparent] === undefined) {
      headers[HeaderNames.traceparent] = traceparent.value
    }
    const candidate = {
      id: uuidv7(now),
      type: eventType.type,
      version: eventType.version,
      aggregateType: eventType.aggregateType,
      aggregateId: draft.aggregateId,
      orderingKey: draft.orderingKey ?? draft.aggregateId,
      payload: JSON.parse(json) as unknown,
      headers,
      occurredAt: new Date(now)
    }
    const checked = validateMessage(candidate)
    if (checked._tag === "Failure") {
      return yield* invalid(
        draft,
        `${eventType.type} v${eventType.version}: invalid envelope (type, version, aggregate id, ordering key or headers)`
      )
    }
    return candidate
  })

/**
 * The lane of a relay in this process serving `store` (eager dispatch, registered in the
 * `EagerDispatch` registry provided with the store), when it has room and the transaction defers
 * after-commit work: where `afterCommit` would run at once, handing events over could publish what
 * may still roll back.
 */
const eagerLane = (store: OutboxStore["Service"], n: number) =>
  Effect.flatMap(EagerDispatch.Lanes, (lanes) => {
    const lane = lanes.lookup(store, n)
    if (lane === undefined) return Effect.succeed(undefined)
    return Effect.map(store.defersAfterCommit, (defers) => defers ? lane : undefined)
  })

/**
 * Appends events in the current transaction. All drafts are validated first: if any fails its
 * schema, nothing is written. Returns the messages as written (ids, headers, timestamps).
 * @since 0.1.0
 * @category appending
 */
export const appendAll = (
  drafts: ReadonlyArray<EventDraft>
): Effect.Effect<ReadonlyArray<Message>, AppendError, OutboxStore> =>
  Effect.gen(function*() {
    const store = yield* OutboxStore
    const now = yield* Clock.currentTimeMillis
    const traceparent = yield* Tracing.currentTraceparent
    const messages = yield* Effect.forEach(drafts, (draft) => encode(draft, now, traceparent))
    if (messages.length === 1) yield* Effect.annotateCurrentSpan("messaging.message.id", messages[0]!.id)
    if (messages.length === 0) return messages
    const lane = yield* eagerLane(store, messages.length)
    yield* store.append(messages, lane?.claim)
    if (lane !== undefined) {
      const createdAt = new Date(now)
      yield* store.afterCommit(lane.deliver(messages.map((message) => ({ message, attempts: 1, createdAt }))))
    } else {
      const wakeups = yield* Wakeups
      yield* store.afterCommit(wakeups.signal("local"))
    }
    return messages
  }).pipe(MessagingSpans.create(drafts.map((d) => d.eventType.type)))

/**
 * Appends one event of a declared type in the current transaction.
 * @since 0.1.0
 * @category appending
 */
export const append = <E extends EventType<string, any>>(
  eventType: E,
  input: EventInput<E["schema"]["Type"]>
): Effect.Effect<Message, AppendError, OutboxStore> =>
  Effect.map(appendAll([eventType.make(input)]), (messages) => messages[0]!)

/**
 * Runs `effect` in a transaction of the outbox store (an app with its own SqlClient can use `sql.withTransaction`).
 * @since 0.1.0
 * @category appending
 */
export const transaction = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | StoreError, R | OutboxStore> => OutboxStore.use((store) => store.withTransaction(effect))
