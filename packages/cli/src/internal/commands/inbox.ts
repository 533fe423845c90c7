/** `tidings inbox list | replay`. */
import * as Admin from "@tidings/core/Admin"
import { InboxStore } from "@tidings/core/InboxStore"
import { Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Out from "../output.ts"
import { SettingError, settings, type Subcommand, withStores } from "../root.ts"

const list = Command.make("list", {
  status: Flag.Literals("status", ["processing", "processed", "failed"] as const).pipe(
    Flag.withDefault("failed" as const),
    Flag.withDescription("Rows in this status (default failed: the dead letters)")
  ),
  consumer: Flag.String("consumer").pipe(Flag.optional, Flag.withDescription("Only this consumer's rows")),
  limit: Flag.Int("limit").pipe(Flag.withDefault(50))
}, (f) =>
  withStores(Effect.gen(function*() {
    const s = yield* settings
    const rows = yield* InboxStore.use((store) =>
      store.list({
        limit: f.limit,
        status: f.status,
        ...(Option.isSome(f.consumer) ? { consumer: f.consumer.value } : {})
      })
    )
    if (s.json) return yield* Out.json(rows)
    yield* Out.table(
      ["message", "consumer", "status", "attempts", "crashes", "last error", "received"],
      rows.map((r) => [r.messageId, r.consumer, r.status, r.attempts, r.crashes, r.lastError, r.receivedAt]),
      { empty: `no ${f.status} rows` }
    )
  }))).pipe(Command.withDescription("Inbox rows, most recent first (default: the dead letters)"))

const replay = Command.make("replay", {
  ids: Argument.String("message-id").pipe(
    Argument.variadic(),
    Argument.withDescription("Dead-lettered messages to replay")
  ),
  consumer: Flag.String("consumer").pipe(Flag.withDescription("The consumer that dead-lettered them")),
  all: Flag.Boolean("all").pipe(Flag.withDefault(false), Flag.withDescription("Every dead letter of the consumer"))
}, (f) =>
  withStores(Effect.gen(function*() {
    const s = yield* settings
    if ((f.ids.length > 0) === f.all) {
      return yield* new SettingError({ message: "say which dead letters to replay: message ids or --all" })
    }
    const ids = f.all
      ? (yield* InboxStore.use((store) => store.list({ status: "failed", consumer: f.consumer, limit: 100_000 }))).map((
        r
      ) => r.messageId)
      : f.ids
    const bar = yield* Out.progress("replaying")
    const results: Array<{ readonly messageId: string } & Admin.Replayed> = []
    for (const [i, messageId] of ids.entries()) {
      results.push({ messageId, ...(yield* Admin.replayDeadLetter(messageId, f.consumer)) })
      yield* bar.report(i + 1, ids.length)
    }
    yield* bar.end
    if (s.json) return yield* Out.json(results)
    const reset = results.filter((r) => r.reset).length
    const requeued = results.filter((r) => r.requeued).length
    yield* Out.line(
      `replayed ${reset} of ${ids.length} for ${f.consumer}: ${requeued} published again from the outbox${
        reset > requeued
          ? `, ${reset - requeued} no longer in the outbox (replay the broker's dead-letter queue: tidings dlq replay)`
          : ""
      }`
    )
    for (const r of results) if (!r.reset) yield* Out.warn(`${r.messageId}: not dead-lettered for ${f.consumer}`)
  }))).pipe(
    Command.withDescription("Forgets dead-lettered inbox rows and publishes their events again from the outbox")
  )

/** `tidings inbox ...` */
export const command: Subcommand<"inbox"> = Command.make("inbox").pipe(
  Command.withSubcommands([list, replay]),
  Command.withDescription("Inspect and replay the inbox's dead letters")
)
