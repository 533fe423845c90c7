/**
 * The root command and what every subcommand shares: `--json`, the database (`--database-url` /
 * `TIDINGS_PG_URL`), the schema (`--schema` / `TIDINGS_SCHEMA`, default `tidings`) and the broker
 * (`--amqp-url` / `TIDINGS_AMQP_URL`), and the layers built from them. Every setting is read the way
 * the components read it in an app (`Settings.read` of their `environment`: every `TIDINGS_PG_*`,
 * `TIDINGS_AMQP_*` ... variable applies), with the flags taking precedence over the variables.
 */
import type { SagaActionError } from "@tidings/core/Admin"
import type { InvalidConfig, StoreError } from "@tidings/core/Errors"
import { InboxStore } from "@tidings/core/InboxStore"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { SagaStore } from "@tidings/core/SagaStore"
import * as Settings from "@tidings/core/Settings"
import * as PgClient from "@tidings/postgres/PgClient"
import * as PgInboxStore from "@tidings/postgres/PgInboxStore"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as PgSagaStore from "@tidings/postgres/PgSagaStore"
import * as AmqpConnection from "@tidings/rabbitmq/AmqpConnection"
import type { AmqpConnectionError, TopologyError } from "@tidings/rabbitmq/AmqpErrors"
import type { DeadLetterQueueNotFound } from "@tidings/rabbitmq/DeadLetters"
import type * as Topology from "@tidings/rabbitmq/Topology"
import { type Cause, ConfigProvider, Effect, Layer, Option, Redacted, Schedule, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import type { SqlClient, SqlError } from "effect/sql"

const SettingErrorBase: Schema.Class<
  SettingError,
  Schema.TaggedStruct<"SettingError", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<SettingError>()("SettingError", { message: Schema.String })

/** A setting the command needs is missing or unusable; the message says which and how to give it. */
export class SettingError extends SettingErrorBase {}

/** `tidings`, with the flags every subcommand accepts (before or after its name). */
export const root = Command.make("tidings").pipe(
  Command.withSharedFlags({
    json: Flag.Boolean("json").pipe(
      Flag.withDefault(false),
      Flag.withDescription("Print JSON for scripts instead of tables")
    ),
    databaseUrl: Flag.Redacted("database-url").pipe(
      Flag.optional,
      Flag.withDescription("PostgreSQL URL (default: TIDINGS_PG_URL)")
    ),
    schema: Flag.String("schema").pipe(
      Flag.optional,
      Flag.withDescription("Schema of Tidings' tables (default: TIDINGS_SCHEMA, else tidings)")
    ),
    amqpUrl: Flag.Redacted("amqp-url").pipe(
      Flag.optional,
      Flag.withDescription("RabbitMQ URL (default: TIDINGS_AMQP_URL)")
    )
  }),
  Command.withDescription(
    "Operate Tidings: migrations, the outbox, the inbox, dead-letter queues, sagas, a relay worker, and a health check"
  )
)

/** The shared settings of the current run. */
export const settings = Effect.gen(function*() {
  const s = yield* root
  return { json: s.json, schema: s.schema, databaseUrl: s.databaseUrl, amqpUrl: s.amqpUrl }
})

/** The variable each flag stands for (the flag wins), and how messages name it. */
const flagged: ReadonlyArray<readonly [variable: string, flag: string]> = [
  ["TIDINGS_PG_URL", "--database-url"],
  ["TIDINGS_SCHEMA", "--schema"],
  ["TIDINGS_AMQP_URL", "--amqp-url"]
]

/**
 * Reads settings with the flags given (and `extra` variables, for a command's own flags) laid over
 * the environment; problems name the flag with its variable.
 */
export const read = <A, R>(
  effect: Effect.Effect<A, InvalidConfig, R>,
  extra: Readonly<Record<string, string | undefined>> = {},
  flags: ReadonlyArray<readonly [string, string]> = []
): Effect.Effect<A, InvalidConfig, Command.CommandContext<"tidings"> | R> =>
  Effect.flatMap(settings, (s) => {
    const given: Record<string, string> = {}
    const put = (name: string, value: string | undefined) => value === undefined ? undefined : (given[name] = value)
    put("TIDINGS_PG_URL", Option.match(s.databaseUrl, { onNone: () => undefined, onSome: Redacted.value }))
    put("TIDINGS_SCHEMA", Option.getOrUndefined(s.schema))
    put("TIDINGS_AMQP_URL", Option.match(s.amqpUrl, { onNone: () => undefined, onSome: Redacted.value }))
    for (const [name, value] of Object.entries(extra)) put(name, value)
    const names = new Map([...flagged, ...flags])
    return effect.pipe(
      Effect.provide(ConfigProvider.layerAdd(ConfigProvider.fromUnknown(given), { asPrimary: true })),
      Effect.mapError((error) =>
        Settings.invalid(
          (error.issues ?? [{ path: error.path, message: error.message }]).map((i) => ({
            path: names.has(i.path) ? `${names.get(i.path)} / ${i.path}` : i.path,
            message: i.message
          })),
          { namePaths: true }
        )
      )
    )
  })

const required = (variable: string, message: string) => (error: InvalidConfig): InvalidConfig | SettingError =>
  error.issues?.some((i) => i.path.endsWith(variable) && i.message === "is required but not set") === true
    ? new SettingError({ message })
    : error

/** The database client's settings: two connections at most, and (as the broker's) 10 s to reach the server (a CLI must not hang). */
const database = read(
  Settings.read(PgClient.environment, {
    defaults: { maxConnections: 2, applicationName: "tidings-cli", startupTimeout: "10 seconds" }
  })
).pipe(
  Effect.mapError(required("TIDINGS_PG_URL", "no database: pass --database-url or set TIDINGS_PG_URL"))
)

/** The database client, for a short-lived command. */
export const databaseLayer = Layer.unwrap(Effect.map(database, PgClient.layer))

/** The stores of the schema over the database. */
export const storesLayer = Layer.unwrap(Effect.map(
  read(Settings.all({
    outbox: Settings.read(PgOutboxStore.environment),
    inbox: Settings.read(PgInboxStore.environment),
    saga: Settings.read(PgSagaStore.environment)
  })),
  (s) => Layer.mergeAll(PgOutboxStore.layer(s.outbox), PgInboxStore.layer(s.inbox), PgSagaStore.layer(s.saga))
))

/** Runs `effect` with the database and the stores. */
export const withStores = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.provide(storesLayer.pipe(Layer.provideMerge(databaseLayer))))

/** Runs `effect` with the database client only. */
export const withDatabase = <A, E, R>(effect: Effect.Effect<A, E, R>) => effect.pipe(Effect.provide(databaseLayer))

/** What the store-backed commands can use. */
export type Stores = OutboxStore | InboxStore | SagaStore | SqlClient.SqlClient | PgClient.PgClient

/** The broker connection: a few quick reconnect attempts, then the command fails (a CLI must not hang). */
export const brokerLayer = (name: string, topology?: Topology.Topology) =>
  Layer.unwrap(Effect.map(
    read(Settings.read(AmqpConnection.environment, { defaults: { name, startupTimeout: "10 seconds" } })).pipe(
      Effect.mapError(required("TIDINGS_AMQP_URL", "no broker: pass --amqp-url or set TIDINGS_AMQP_URL"))
    ),
    (s) =>
      AmqpConnection.layer({
        ...s,
        ...(topology === undefined ? {} : { topology }),
        reconnect: Schedule.exponential("200 millis").pipe(Schedule.upTo({ times: 5 }))
      })
  ))

/** The schema, checked: a lower-case SQL identifier (`--schema`, else `TIDINGS_SCHEMA`, else `tidings`). */
export const schemaName = Effect.map(read(Settings.read(PgSagaStore.environment)), (s) => s.schema)

/** The flags every subcommand accepts. */
export interface SharedFlags {
  readonly json: boolean
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly schema: Option.Option<string>
  readonly amqpUrl: Option.Option<Redacted.Redacted<string>>
}

/** What a subcommand may fail with (the doctor adds `ProblemsFound`). */
export type CommandError =
  | SettingError
  | InvalidConfig
  | StoreError
  | PgClient.PgConfigError
  | SqlError.SqlError
  | AmqpConnectionError
  | TopologyError
  | DeadLetterQueueNotFound
  | SagaActionError

/** A subcommand of `tidings` with its flags (explicit types for JSR). */
export type Subcommand<Name extends string, Input = {}> = Command.Command<
  Name,
  Input,
  {},
  CommandError,
  Command.CommandContext<"tidings">
>
