/** `tidings outbox stats | list | show | retry | discard`. */
import * as Admin from "@tidings/core/Admin"
import { OutboxStore, type Status, toObject as eventJson } from "@tidings/core/OutboxStore"
import { Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Out from "../output.ts"
import { SettingError, settings, type Subcommand, withStores } from "../root.ts"

const statuses = ["pending", "processing", "published", "failed", "suspect"] as const satisfies ReadonlyArray<Status>

const stats = Command.make("stats", {}, () =>
  withStores(Effect.gen(function*() {
    const s = yield* settings
    const store = yield* OutboxStore
    const [counts, failedByType, throughput, holders] = yield* Effect.all([
      store.stats,
      store.countByType({ status: "failed" }),
      store.throughput({ minutes: 15 }),
      store.holders
    ])
    const published15 = throughput.reduce((n, m) => n + m.published, 0)
    if (s.json) return yield* Out.json({ ...counts, publishedLast15Minutes: published15, failedByType, holders })
    yield* Out.table(["status", "events"], statuses.map((st) => [st, counts[st]]))
    yield* Out.line(
      "",
      `oldest pending: ${Out.duration(counts.oldestPendingAgeMs)}; published in the last 15 minutes: ${published15}`
    )
    yield* Out.line(
      holders.length === 0
        ? "no relay holds a claim"
        : `claims held by: ${holders.map((h) => `${h.holder} (${h.events})`).join(", ")}`
    )
    if (failedByType.length > 0) {
      yield* Out.line("", "failed by type:")
      yield* Out.table(["type", "failed"], failedByType.map((t) => [t.type, t.count]))
    }
  }))).pipe(
    Command.withDescription(
      "Counts by status, the oldest pending event's age, throughput, claim holders, failed events by type"
    )
  )

const list = Command.make("list", {
  status: Flag.Literals("status", statuses).pipe(Flag.optional, Flag.withDescription("Only events in this status")),
  type: Flag.String("type").pipe(Flag.optional, Flag.withDescription("Only events of this type")),
  limit: Flag.Int("limit").pipe(Flag.withDefault(50), Flag.withDescription("At most this many (newest first)"))
}, (f) =>
  withStores(Effect.gen(function*() {
    const s = yield* settings
    const events = yield* OutboxStore.use((store) =>
      store.list({
        limit: f.limit,
        ...(Option.isSome(f.status) ? { status: f.status.value } : {}),
        ...(Option.isSome(f.type) ? { type: f.type.value } : {})
      })
    )
    if (s.json) return yield* Out.json(events.map(eventJson))
    yield* Out.table(
      ["id", "type", "aggregate", "status", "attempts", "last error", "created"],
      events.map((
        e
      ) => [
        e.message.id,
        e.message.type,
        `${e.message.aggregateType}/${e.message.aggregateId}`,
        e.status,
        e.attempts,
        e.lastError,
        e.createdAt
      ]),
      { empty: "no events" }
    )
  }))).pipe(Command.withDescription("Events, newest first, by status and type"))

const show = Command.make(
  "show",
  { id: Argument.String("id").pipe(Argument.withDescription("The event id")) },
  ({ id }) =>
    withStores(Effect.gen(function*() {
      const s = yield* settings
      const event = yield* OutboxStore.use((store) => store.get(id))
      if (event === undefined) return yield* new SettingError({ message: `no outbox event ${id}` })
      const e = eventJson(event)
      if (s.json) return yield* Out.json(e)
      yield* Out.line(
        `${e.id}  ${e.type} v${e.version}  ${e.status}`,
        `aggregate ${e.aggregateType}/${e.aggregateId}, ordering key ${e.orderingKey}`,
        `attempts ${e.attempts}; created ${e.createdAt.toISOString()}; due ${e.availableAt.toISOString()}${
          e.publishedAt ? `; published ${e.publishedAt.toISOString()}` : ""
        }`,
        `last error: ${e.lastError ?? "—"} (the outbox keeps the last attempt's error only)`,
        "payload:",
        JSON.stringify(e.payload, null, 2),
        "headers:",
        JSON.stringify(e.headers, null, 2)
      )
    }))
).pipe(Command.withDescription("One event with its payload, headers and last error"))

const retry = Command.make("retry", {
  ids: Argument.String("id").pipe(Argument.variadic(), Argument.withDescription("Failed events to retry")),
  type: Flag.String("type").pipe(Flag.optional, Flag.withDescription("Retry every failed event of this type")),
  all: Flag.Boolean("all").pipe(Flag.withDefault(false), Flag.withDescription("Retry every failed event"))
}, (f) =>
  withStores(Effect.gen(function*() {
    const s = yield* settings
    const chosen = [f.ids.length > 0, Option.isSome(f.type), f.all].filter(Boolean).length
    if (chosen !== 1) {
      return yield* new SettingError({ message: "say which failed events to retry: ids, --type TYPE or --all" })
    }
    const selection: Admin.Selection = f.ids.length > 0
      ? { ids: f.ids }
      : Option.isSome(f.type)
      ? { type: f.type.value }
      : { all: true }
    const bar = yield* Out.progress("retrying")
    const retried = yield* Admin.retryFailed(selection, { onProgress: bar.report })
    yield* bar.end
    if (s.json) return yield* Out.json({ retried })
    yield* Out.line(
      `retried ${retried} failed event${retried === 1 ? "" : "s"}: pending again, with their attempts reset`
    )
  }))).pipe(Command.withDescription("Failed events back to pending (by ids, --type or --all), with a progress bar"))

const discard = Command.make("discard", {
  ids: Argument.String("id").pipe(Argument.atLeast(1), Argument.withDescription("Failed events to delete for good"))
}, ({ ids }) =>
  withStores(Effect.gen(function*() {
    const s = yield* settings
    const discarded = yield* OutboxStore.use((store) => store.discardFailed(ids))
    if (s.json) return yield* Out.json({ discarded })
    yield* Out.line(`discarded ${discarded} failed event${discarded === 1 ? "" : "s"}`)
  }))).pipe(Command.withDescription("Deletes failed events for good"))

/** `tidings outbox ...` */
export const command: Subcommand<"outbox"> = Command.make("outbox").pipe(
  Command.withSubcommands([stats, list, show, retry, discard]),
  Command.withDescription("Inspect and repair the outbox")
)
