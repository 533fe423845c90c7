/**
 * `tidings doctor`: is this deployment healthy? Connectivity (database, broker), pending migrations,
 * relay lag (and whether any relay holds claims), log mode's groups (lag, members), failed counts
 * (outbox, inbox, sagas), and the oldest open transaction holding back ordered and log publishing.
 * Exits 1 when it finds a problem.
 */
import { InboxStore } from "@tidings/core/InboxStore"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { SagaStore } from "@tidings/core/SagaStore"
import * as Migrator from "@tidings/postgres/Migrator"
import * as PgLogStore from "@tidings/postgres/PgLogStore"
import * as AmqpConnection from "@tidings/rabbitmq/AmqpConnection"
import { type Cause, Effect, Exit, Layer, Option, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import { SqlClient } from "effect/sql"
import * as Out from "../output.ts"
import { brokerLayer, type CommandError, databaseLayer, schemaName, settings, storesLayer } from "../root.ts"

const ProblemsFoundBase: Schema.Class<
  ProblemsFound,
  Schema.TaggedStruct<"ProblemsFound", {
    readonly count: Schema.Number
  }>,
  Cause.YieldableError
> = Schema.TaggedError<ProblemsFound>()("ProblemsFound", { count: Schema.Number })

/** The doctor found problems (it has printed them); the process exits 1. */
export class ProblemsFound extends ProblemsFoundBase {}

type Status = "ok" | "warn" | "fail"
interface Check {
  readonly name: string
  readonly status: Status
  readonly message: string
}

const describe = (cause: unknown): string => {
  const e = cause as { readonly message?: unknown; readonly _tag?: unknown }
  return typeof e?.message === "string" && e.message !== ""
    ? e.message
    : typeof e?._tag === "string"
    ? e._tag
    : String(cause)
}

const firstError = <E>(exit: Exit.Exit<unknown, E>): string =>
  Exit.isFailure(exit) ? describe(Option.getOrElse(Exit.findErrorOption(exit), () => "a defect")) : ""

interface OpenTransaction {
  readonly pid: number
  readonly app: string
  readonly state: string
  readonly age_ms: number
  readonly query: string
}

/** `tidings doctor` */
export const command: Command.Command<
  "doctor",
  {
    readonly maxLag: number
    readonly maxTransactionAge: number
  },
  {},
  ProblemsFound | CommandError,
  Command.CommandContext<"tidings">
> = Command.make("doctor", {
  maxLag: Flag.Int("max-lag").pipe(
    Flag.withDefault(30),
    Flag.withDescription("Seconds the oldest pending event may wait before the relay counts as behind")
  ),
  maxTransactionAge: Flag.Int("max-transaction-age").pipe(
    Flag.withDefault(60),
    Flag.withDescription(
      "Seconds a writing transaction may stay open before it counts as holding back ordered publishing"
    )
  )
}, (f) =>
  Effect.scoped(Effect.gen(function*() {
    const s = yield* settings
    const schema = yield* schemaName
    const checks: Array<Check> = []
    const add = (name: string, status: Status, message: string) => checks.push({ name, status, message })

    const built = yield* Effect.exit(Layer.build(storesLayer.pipe(Layer.provideMerge(databaseLayer))))
    if (Exit.isFailure(built)) {
      add("database", "fail", `cannot connect: ${firstError(built)}`)
    } else {
      const run = <A, E>(effect: Effect.Effect<A, E, any>) =>
        Effect.exit(Effect.provide(effect, built.value)) as Effect.Effect<Exit.Exit<A, E>>
      const server = yield* run(SqlClient.SqlClient.use((q) =>
        q<{
          version: string
          db: string
        }>`SELECT current_setting('server_version') AS version, current_database() AS db`
      ))
      if (Exit.isFailure(server)) {
        add("database", "fail", firstError(server))
      } else {add(
          "database",
          "ok",
          `PostgreSQL ${server.value[0]?.version} (database ${server.value[0]?.db}), schema ${schema}`
        )}

      const pending = yield* run(Migrator.pending({ schema }))
      const appliedCount = Exit.isSuccess(pending) ? Migrator.all.length - pending.value.length : 0
      if (Exit.isFailure(pending)) add("migrations", "fail", firstError(pending))
      else {
        const missing = pending.value
        if (appliedCount === 0) add("migrations", "fail", `schema ${schema} has no Tidings tables: run tidings migrate`)
        else if (missing.length > 0) {
          add(
            "migrations",
            "fail",
            `${missing.length} pending (${
              missing.map((m) => `${m.version} ${m.name}`).join(", ")
            }): run tidings migrate`
          )
        } else add("migrations", "ok", `${appliedCount} applied, none pending`)
      }

      if (appliedCount > 0) {
        const outbox = yield* run(OutboxStore.use((o) => Effect.all({ stats: o.stats, holders: o.holders })))
        if (Exit.isFailure(outbox)) add("relay", "fail", firstError(outbox))
        else {
          const { holders, stats } = outbox.value
          const age = stats.oldestPendingAgeMs
          const held = holders.length === 0
            ? "no relay holds a claim"
            : `claims held by ${holders.map((h) => `${h.holder} (${h.events})`).join(", ")}`
          if (age === null) add("relay", "ok", `no pending events; ${held}`)
          else if (age > f.maxLag * 1000) {
            add(
              "relay",
              "fail",
              `${stats.pending} event${stats.pending === 1 ? "" : "s"} pending, the oldest for ${
                Out.duration(age)
              } (more than ${f.maxLag} s): ${
                holders.length === 0
                  ? "no relay holds a claim: is a relay running against this schema (tidings relay)?"
                  : `the relays are behind (${held})`
              }`
            )
          } else add("relay", "ok", `${stats.pending} pending, the oldest for ${Out.duration(age)}; ${held}`)

          const inbox = yield* run(InboxStore.use((i) => i.count()))
          const sagas = yield* run(SagaStore.use((g) => g.countByStatus))
          const parts = [
            `outbox ${stats.failed} failed${stats.suspect > 0 ? `, ${stats.suspect} suspect` : ""}`,
            Exit.isSuccess(inbox) ? `inbox ${inbox.value.failed} dead-lettered` : "inbox unreadable",
            Exit.isSuccess(sagas) ? `sagas ${sagas.value.failed} failed` : "sagas unreadable"
          ]
          const bad = stats.failed + stats.suspect + (Exit.isSuccess(inbox) ? inbox.value.failed : 0) +
            (Exit.isSuccess(sagas) ? sagas.value.failed : 0)
          add(
            "failed",
            bad > 0 ? "warn" : "ok",
            `${parts.join(", ")}${
              bad > 0
                ? " (tidings outbox list --status failed, tidings inbox list, tidings saga list --status failed)"
                : ""
            }`
          )
        }
      }

      if (appliedCount > 0) {
        // Log mode is in use once a store fixed the log's partition count; reading it changes nothing.
        const inUse = yield* run(
          SqlClient.SqlClient.use((q) => q<{ n: number }>`SELECT count(*)::int AS n FROM ${q(`${schema}.log_stream`)}`)
        )
        if (Exit.isFailure(inUse)) add("log", "fail", firstError(inUse))
        else if ((inUse.value[0]?.n ?? 0) > 0) {
          const groups = yield* run(Effect.flatMap(PgLogStore.make({ schema }), ({ log }) => log.groups))
          if (Exit.isFailure(groups)) add("log", "fail", firstError(groups))
          else if (groups.value.length === 0) {
            add("log", "ok", "log mode: no group reads the log yet (tidings relay --mode log starts one)")
          } else {
            for (const g of groups.value) {
              const members = `${g.members.length} member${g.members.length === 1 ? "" : "s"}`
              const retrying = g.retrying > 0
                ? `, ${g.retrying} partition head${g.retrying === 1 ? "" : "s"} retrying`
                : ""
              const status: Status = g.lag > 0 && g.members.length === 0 ? "fail" : g.retrying > 0 ? "warn" : "ok"
              add(
                `log ${g.group}`,
                status,
                `${members}, ${g.lag} event${g.lag === 1 ? "" : "s"} behind${retrying}${
                  status === "fail" ? ": no member is running: is a log relay or consumer of this group running?" : ""
                }`
              )
            }
          }
        }
      }

      // A transaction holding an xid keeps pg_snapshot_xmin back: per-key and log relays publish nothing written after it began.
      const open = yield* run(SqlClient.SqlClient.use((q) =>
        q<OpenTransaction>`SELECT pid, coalesce(application_name, '') AS app, coalesce(state, '') AS state,
            (extract(epoch FROM now() - xact_start) * 1000)::float8 AS age_ms, left(coalesce(query, ''), 120) AS query
          FROM pg_stat_activity
          WHERE xact_start IS NOT NULL AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()
            AND backend_type = 'client backend' AND datname = current_database()
          ORDER BY xact_start LIMIT 1`
      ))
      if (Exit.isFailure(open)) add("transactions", "warn", `cannot read pg_stat_activity: ${firstError(open)}`)
      else {
        const t = open.value[0]
        if (t !== undefined && Number(t.age_ms) > f.maxTransactionAge * 1000) {
          add(
            "transactions",
            "warn",
            `a transaction has been open for ${Out.duration(Number(t.age_ms))} (pid ${t.pid}${
              t.app === "" ? "" : `, ${t.app}`
            }, ${t.state}; last query: ${
              t.query.replace(/\s+/g, " ")
            }): it holds back ordered (per-key) and log publishing until it ends`
          )
        } else {add(
            "transactions",
            "ok",
            t === undefined
              ? "no writing transaction open"
              : `the oldest writing transaction is ${Out.duration(Number(t.age_ms))} old`
          )}
      }
    }

    if (Option.isSome(s.amqpUrl)) {
      const broker = yield* Effect.exit(Layer.build(brokerLayer("tidings-doctor")))
      if (Exit.isFailure(broker)) add("broker", "fail", `cannot connect: ${firstError(broker)}`)
      else {
        const { description, ready } = yield* Effect.provide(
          AmqpConnection.AmqpConnection.use((c) =>
            Effect.map(c.isReady, (ready) => ({ description: c.description, ready }))
          ),
          broker.value
        )
        add("broker", ready ? "ok" : "fail", `${description}${ready ? "" : ": connected but blocked"}`)
      }
    }

    const problems = checks.filter((c) => c.status !== "ok").length
    if (s.json) yield* Out.json({ ok: problems === 0, schema, checks })
    else {
      const mark: Record<Status, string> = { ok: "ok  ", warn: "WARN", fail: "FAIL" }
      const width = Math.max(...checks.map((c) => c.name.length))
      yield* Out.line(...checks.map((c) => `${mark[c.status]}  ${c.name.padEnd(width)}  ${c.message}`))
      yield* Out.line(
        "",
        problems === 0 ? "no problems found" : `${problems} problem${problems === 1 ? "" : "s"} found`
      )
    }
    if (problems > 0) return yield* new ProblemsFound({ count: problems })
  }))).pipe(
    Command.withDescription(
      "Checks connectivity, migrations, relay lag, failed counts and open transactions; exits 1 on a problem"
    )
  )
