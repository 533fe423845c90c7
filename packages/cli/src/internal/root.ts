/**
 * The root command and what every subcommand shares: `--json`, the database (`--database-url` /
 * `TIDINGS_PG_URL`), the schema (`--schema` / `TIDINGS_SCHEMA`, default `tidings`) and the broker
 * (`--amqp-url` / `TIDINGS_AMQP_URL`), and the layers built from them.
 */
import { InboxStore } from "@tidings/core/InboxStore"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { SagaStore } from "@tidings/core/SagaStore"
import * as AmqpConnection from "@tidings/rabbitmq/AmqpConnection"
import type * as Topology from "@tidings/rabbitmq/Topology"
import * as PgClient from "@tidings/postgres/PgClient"
import * as PgInboxStore from "@tidings/postgres/PgInboxStore"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as PgSagaStore from "@tidings/postgres/PgSagaStore"
import { Config, Effect, Layer, Option, type Redacted, Schedule, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import type { SqlClient } from "effect/sql"

/** A setting the command needs is missing or unusable; the message says which and how to give it. */
export class SettingError extends Schema.TaggedError<SettingError>()("SettingError", { message: Schema.String }) {}

/** `tidings`, with the flags every subcommand accepts (before or after its name). */
export const root = Command.make("tidings").pipe(
  Command.withSharedFlags({
    json: Flag.Boolean("json").pipe(Flag.withDefault(false), Flag.withDescription("Print JSON for scripts instead of tables")),
    databaseUrl: Flag.Redacted("database-url").pipe(
      Flag.withFallbackConfig(Config.Redacted("TIDINGS_PG_URL")),
      Flag.optional,
      Flag.withDescription("PostgreSQL URL (default: TIDINGS_PG_URL)")
    ),
    schema: Flag.String("schema").pipe(
      Flag.withFallbackConfig(Config.String("TIDINGS_SCHEMA")),
      Flag.withDefault("tidings"),
      Flag.withDescription("Schema of Tidings' tables (default: TIDINGS_SCHEMA, else tidings)")
    ),
    amqpUrl: Flag.Redacted("amqp-url").pipe(
      Flag.withFallbackConfig(Config.Redacted("TIDINGS_AMQP_URL")),
      Flag.optional,
      Flag.withDescription("RabbitMQ URL (default: TIDINGS_AMQP_URL)")
    )
  }),
  Command.withDescription("Operate Tidings: migrations, the outbox, the inbox, dead-letter queues, sagas, a relay worker, and a health check")
)

/** The shared settings of the current run. */
export const settings = Effect.gen(function*() {
  const s = yield* root
  return { json: s.json, schema: s.schema, databaseUrl: s.databaseUrl, amqpUrl: s.amqpUrl }
})

const databaseUrl = Effect.flatMap(settings, (s): Effect.Effect<Redacted.Redacted<string>, SettingError> =>
  Option.isSome(s.databaseUrl) ? Effect.succeed(s.databaseUrl.value) : Effect.fail(new SettingError({ message: "no database: pass --database-url or set TIDINGS_PG_URL" })))

/** The database client, for a short-lived command (two connections at most). */
export const databaseLayer = Layer.unwrap(Effect.map(databaseUrl, (url) => PgClient.layer({ url, maxConnections: 2, applicationName: "tidings-cli" })))

/** The stores of the schema over the database. */
export const storesLayer = Layer.unwrap(Effect.map(settings, (s) =>
  Layer.mergeAll(PgOutboxStore.layer({ schema: s.schema }), PgInboxStore.layer({ schema: s.schema }), PgSagaStore.layer({ schema: s.schema }))))

/** Runs `effect` with the database and the stores. */
export const withStores = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.provide(storesLayer.pipe(Layer.provideMerge(databaseLayer))))

/** Runs `effect` with the database client only. */
export const withDatabase = <A, E, R>(effect: Effect.Effect<A, E, R>) => effect.pipe(Effect.provide(databaseLayer))

/** What the store-backed commands can use. */
export type Stores = OutboxStore | InboxStore | SagaStore | SqlClient.SqlClient | PgClient.PgClient

/** The broker connection: a few quick reconnect attempts, then the command fails (a CLI must not hang). */
export const brokerLayer = (name: string, topology?: Topology.Topology) =>
  Layer.unwrap(Effect.flatMap(settings, (s) =>
    Option.isNone(s.amqpUrl)
      ? Effect.fail(new SettingError({ message: "no broker: pass --amqp-url or set TIDINGS_AMQP_URL" }))
      : Effect.succeed(AmqpConnection.layer({
        url: s.amqpUrl.value,
        name,
        ...(topology === undefined ? {} : { topology }),
        startupTimeout: "10 seconds",
        reconnect: Schedule.exponential("200 millis").pipe(Schedule.upTo({ times: 5 }))
      }))))

const identifier = /^[a-z_][a-z0-9_]{0,62}$/

/** The schema, checked: a lower-case SQL identifier. */
export const schemaName = Effect.flatMap(settings, (s): Effect.Effect<string, SettingError> =>
  identifier.test(s.schema) ? Effect.succeed(s.schema) : Effect.fail(new SettingError({ message: `--schema / TIDINGS_SCHEMA must be a lower-case SQL identifier, got ${JSON.stringify(s.schema)}` })))
