/**
 * The settings schemas of the Postgres client and stores, and how each reads the environment:
 * `TIDINGS_PG_*` for the client (the URL a secret), one `TIDINGS_SCHEMA` shared by every store,
 * `TIDINGS_OUTBOX_*`, `TIDINGS_INBOX_*` and `TIDINGS_LOG_*` for the stores' own options.
 * @internal
 */
import * as Settings from "@tidings/core/Settings"
import { type Duration, Effect, type Redacted, Schema } from "effect"

// The schemas are typed explicitly: they are part of the public API (`PgClient.ConfigSchema`, ...), and
// JSR's fast check reads only declared types.
type Defaulted<S extends Schema.Top> = Schema.withDecodingDefault<S>

const withDefault = <S extends Schema.Top>(schema: S, value: S["Encoded"]): Defaulted<S> =>
  schema.pipe(Schema.withDecodingDefault(Effect.succeed(value)))

const postgresUrl = (value: string): string | undefined => {
  if (!/^postgres(ql)?:\/\//i.test(value)) return "must be a postgres:// or postgresql:// URL"
  try {
    new URL(value)
    return undefined
  } catch {
    // The URL parser's message would repeat the URL, password included.
    return "is not a valid URL (multi-host URLs are not supported)"
  }
}

/** The client's settings (`PgClient.ConfigSchema`). */
export const ClientSchema: Schema.Struct<{
  readonly url: Schema.Codec<Redacted.Redacted<string>, string | Redacted.Redacted<string>>
  readonly maxConnections: Defaulted<Schema.Codec<number>>
  readonly idleTimeout: Schema.optional<Schema.Codec<Duration.Duration, Duration.Input>>
  readonly connectTimeout: Defaulted<Schema.Codec<Duration.Duration, Duration.Input>>
  readonly startupTimeout: Defaulted<Schema.Codec<Duration.Duration, Duration.Input>>
  readonly endTimeout: Defaulted<Schema.Codec<Duration.Duration, Duration.Input>>
  readonly applicationName: Defaulted<Schema.String>
  readonly prepare: Defaulted<Schema.Boolean>
}> = Schema.Struct({
  url: Settings.secret({ check: postgresUrl }),
  maxConnections: withDefault(Settings.int(1, 10_000), 10),
  idleTimeout: Schema.optional(Settings.duration()),
  connectTimeout: withDefault(Settings.duration(), "10 seconds"),
  startupTimeout: withDefault(Settings.duration({ allowZero: true }), "30 seconds"),
  endTimeout: withDefault(Settings.duration({ allowZero: true }), "500 millis"),
  applicationName: withDefault(Schema.String, "tidings"),
  prepare: withDefault(Schema.Boolean, true)
})

/** `TIDINGS_PG_URL`, `TIDINGS_PG_MAX_CONNECTIONS`, ... */
export const client: Settings.Environment<typeof ClientSchema> = {
  component: "PgClient",
  schema: ClientSchema,
  prefix: "TIDINGS_PG"
}

const schemaName: Schema.String = Schema.String.check(
  Schema.makeFilter((s: string) =>
    /^[a-z_][a-z0-9_]{0,62}$/.test(s)
      ? undefined
      : "must be 1-63 characters of a-z, 0-9 and _, not starting with a digit"
  )
)
const bookkeepingCommit: Defaulted<Schema.Literals<readonly ["async", "sync"]>> = withDefault(
  Schema.Literals(["async", "sync"]),
  "async"
)

/** The outbox store's settings (`PgOutboxStore.ConfigSchema`). */
export const OutboxSchema: Schema.Struct<{
  readonly schema: Defaulted<Schema.String>
  readonly notify: Defaulted<Schema.Union<readonly [Schema.Boolean, Schema.Literal<"in-transaction">]>>
  readonly bookkeepingCommit: typeof bookkeepingCommit
}> = Schema.Struct({
  schema: withDefault(schemaName, "tidings"),
  notify: withDefault(Schema.Union([Schema.Boolean, Schema.Literal("in-transaction")]), false),
  bookkeepingCommit
})

/** The inbox store's settings (`PgInboxStore.ConfigSchema`). */
export const InboxSchema: Schema.Struct<
  { readonly schema: Defaulted<Schema.String>; readonly bookkeepingCommit: typeof bookkeepingCommit }
> = Schema.Struct({ schema: withDefault(schemaName, "tidings"), bookkeepingCommit })

/** The saga store's settings (`PgSagaStore.ConfigSchema`). */
export const SagaSchema: Schema.Struct<{ readonly schema: Defaulted<Schema.String> }> = Schema.Struct({
  schema: withDefault(schemaName, "tidings")
})

/** The log store's settings (`PgLogStore.ConfigSchema`). */
export const LogSchema: Schema.Struct<{
  readonly schema: Defaulted<Schema.String>
  readonly partitions: Schema.optional<Schema.Codec<number>>
  readonly notify: Defaulted<Schema.Boolean>
  readonly bookkeepingCommit: typeof bookkeepingCommit
}> = Schema.Struct({
  schema: withDefault(schemaName, "tidings"),
  partitions: Schema.optional(Settings.int(1, 4096)),
  notify: withDefault(Schema.Boolean, false),
  bookkeepingCommit
})

const shared = { schema: "TIDINGS_SCHEMA" } as const

/** `TIDINGS_SCHEMA`, `TIDINGS_OUTBOX_NOTIFY`, `TIDINGS_OUTBOX_BOOKKEEPING_COMMIT`. */
export const outbox: Settings.Environment<typeof OutboxSchema> = {
  component: "PgOutboxStore",
  schema: OutboxSchema,
  prefix: "TIDINGS_OUTBOX",
  names: shared
}
/** `TIDINGS_SCHEMA`, `TIDINGS_INBOX_BOOKKEEPING_COMMIT`. */
export const inbox: Settings.Environment<typeof InboxSchema> = {
  component: "PgInboxStore",
  schema: InboxSchema,
  prefix: "TIDINGS_INBOX",
  names: shared
}
/** `TIDINGS_SCHEMA`. */
export const saga: Settings.Environment<typeof SagaSchema> = {
  component: "PgSagaStore",
  schema: SagaSchema,
  prefix: "TIDINGS_SAGA",
  names: shared
}
/** `TIDINGS_SCHEMA`, `TIDINGS_LOG_PARTITIONS`, `TIDINGS_LOG_NOTIFY`, `TIDINGS_LOG_BOOKKEEPING_COMMIT`. */
export const log: Settings.Environment<typeof LogSchema> = {
  component: "PgLogStore",
  schema: LogSchema,
  prefix: "TIDINGS_LOG",
  names: shared
}
