/**
 * The spans of log mode, after the OpenTelemetry messaging conventions as the per-row relay names
 * its own (`internal/messagingSpans.ts`):
 *
 * - `receive log` (client): a read that took events, lost a lease or failed; a read that found
 *   nothing runs untraced (an idle group emits no span).
 * - `send <destination>` (producer): one per event the log relay publishes (`logPublish.ts`).
 * - `settle log` (client): the statement that moves a batch's cursors.
 * - `process log` (consumer): `LogConsumer` handling one event, a child of (and linked to) the
 *   producer's span carried in the event's `traceparent`.
 * - `tidings.log.lease` (internal, not a messaging operation): a lease round that acquired, released
 *   or lost partitions, or failed; a heartbeat that changed nothing runs untraced.
 * @internal
 */
import { Effect, Exit, type Tracer } from "effect"
import type * as LogStore from "../LogStore.ts"
import * as Tracing from "../Tracing.ts"
import { spanWhen } from "./messagingSpans.ts"

/** `messaging.system` of the log table. */
export const logSystem = "tidings-log"

const log: Tracing.Destination = { system: logSystem, name: "log" }

/** The span names (`send` is followed by the publisher's destination). */
export const spanNames = {
  receive: Tracing.spanName("receive", "log"),
  send: "send",
  settle: Tracing.spanName("settle", "log"),
  process: Tracing.spanName("process", "log"),
  lease: "tidings.log.lease"
} as const

const groupAttributes = (group: string): Record<string, string> => ({
  "messaging.consumer.group.name": group,
  "tidings.log.group": group
})

const batch = (n: number): Record<string, number> => n === 1 ? {} : { "messaging.batch.message_count": n }

/** Around a read: a `receive log` span when it took events, lost leases or failed; nothing when it found nothing. */
export const receive =
  (group: string, partitions: number) =>
  <E, R>(effect: Effect.Effect<LogStore.ReadResult, E, R>): Effect.Effect<LogStore.ReadResult, E, R> =>
    spanWhen<LogStore.ReadResult, E>(
      spanNames.receive,
      (exit) => ({
        kind: "client",
        attributes: {
          ...Tracing.messagingAttributes({ type: "receive", name: "read" }, log),
          ...(Exit.isSuccess(exit) ? { "messaging.batch.message_count": exit.value.events.length } : {}),
          ...groupAttributes(group),
          "tidings.log.partitions": partitions
        }
      }),
      (exit) => Exit.isFailure(exit) || exit.value.events.length > 0 || exit.value.lost.length > 0
    )(effect)

/** Around a settle of `events` events: a `settle log` span. */
export const settle =
  (group: string, events: number) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.withSpan(effect, spanNames.settle, {
      ...Tracing.noStack,
      kind: "client",
      attributes: {
        ...Tracing.messagingAttributes({ type: "settle", name: "settle" }, log),
        ...batch(events),
        ...groupAttributes(group)
      }
    })

/** Around `LogConsumer`'s handling of one event: a `process log` span. */
export const process = (
  group: string,
  event: { readonly partition: number; readonly message: { readonly id: string; readonly type: string } },
  attempt: number,
  parent: Tracer.ExternalSpan | undefined
) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withSpan(effect, spanNames.process, {
    ...Tracing.noStack,
    kind: "consumer",
    ...(parent === undefined ? {} : { parent, links: [{ span: parent, attributes: {} }] }),
    attributes: {
      ...Tracing.messagingAttributes({ type: "process", name: "process" }, log),
      ...groupAttributes(group),
      "messaging.message.id": event.message.id,
      "tidings.event.type": event.message.type,
      "tidings.consumer.attempt": attempt,
      "tidings.log.partition": event.partition
    }
  })

/** Around a lease round: a `tidings.log.lease` span when it changed what this member holds, or failed. */
export const lease =
  (group: string) =>
  <A extends { readonly changed: boolean }, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    spanWhen<A, E>(
      spanNames.lease,
      () => ({ attributes: { "tidings.log.group": group } }),
      (exit) => Exit.isFailure(exit) || exit.value.changed
    )(effect)
