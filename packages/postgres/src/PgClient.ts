/**
 * The Tidings Postgres client: effect/sql's `SqlClient` on top of postgres.js, plus a `PgClient`
 * service exposing the postgres.js instance and LISTEN/NOTIFY.
 *
 * Row values come back as postgres.js parses them:
 * - `json` / `jsonb`: parsed (objects, arrays, numbers, ...);
 * - `timestamptz` / `timestamp` / `date`: `Date`;
 * - `int8` / `bigint` / `numeric`: **string** (they do not fit a JS number; parse them yourself,
 *   e.g. `BigInt(row.id)`), while `int2` / `int4` / `float4` / `float8` / `oid` are numbers;
 * - `uuid`, `text`, ...: string; `bytea`: `Buffer`; `bool`: boolean; arrays of these: JS arrays.
 *
 * Parameters: `Date`, `bigint`, booleans, `Uint8Array`, arrays (for `= ANY(${ids})` or array columns)
 * and `undefined` (sent as NULL) are all fine. For json / jsonb parameters the server's inferred type
 * decides: a non-string value (object, array, number) is JSON-encoded, and a **string is sent as JSON
 * text as is**, so both `${obj}` and `${JSON.stringify(obj)}::jsonb` store the object (a plain JS
 * string meant as a JSON string value must be encoded first: `${JSON.stringify("text")}`). Where the
 * server cannot infer json (e.g. `SELECT ${x}`), use {@link jsonb}. An array parameter takes the type
 * the server infers (`text[]`, `uuid[]` for `= ANY(${ids})` on a uuid, `timestamptz[]`, ...), and the
 * array types of the database's own types (enums, domains) are read when the client starts; an array
 * of a type created later comes back as its text form (`{a,b}`) until the client is restarted.
 *
 * Connection faults: each connection lives exactly as long as its socket. A statement whose
 * connection is lost (terminated backend, server restart, network) fails with a retryable
 * `SqlError` (see {@link isRetryableSqlError}); nothing it sent is sent again, and the next
 * statement gets a new connection. No connection failure escapes as an unhandled rejection.
 *
 * @module
 */
import type { InvalidConfig } from "@tidings/core/Errors"
import * as Health from "@tidings/core/Health"
import * as Settings from "@tidings/core/Settings"
import { Cause, Config, Context, Duration, Effect, Layer, Redacted, Schema, type Stream } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient, type SqlConnection, SqlError, Statement } from "effect/sql"
import postgres from "postgres"
import * as Environment from "./internal/environment.ts"
import { InvalidSetting, resolve, type ResolvedConfig } from "./internal/pgConfig.ts"
import {
  heldAccess,
  makeConnection,
  type PgConnection,
  poolAccess,
  type QueryOptions
} from "./internal/pgConnection.ts"
import { clientSqlError, errorCode, isRetryableCode, scrubString, toSqlError } from "./internal/pgError.ts"
import { makeListener } from "./internal/pgListener.ts"
import { closeSockets, makePool } from "./internal/pgPool.ts"
import { connectionError, socketFactory, type SocketRegistry } from "./internal/pgSocket.ts"
import { retryUntil } from "./internal/pgStartup.ts"
import { type ArrayType, builtinArrayTypes, registerArrayTypes, userArrayTypesQuery } from "./internal/pgTypes.ts"

/**
 * Settings of {@link layer}. Only `url` is required.
 * @since 0.1.0
 * @category config
 */
export interface PgClientConfig {
  /** `postgres://user:password@host:port/database?sslmode=...`; wrap it in `Redacted` where it is read. */
  readonly url: Redacted.Redacted<string> | string
  /**
   * Size of the pool; a statement or an open transaction holds one of them. `listen` uses one more,
   * outside it, and `PgClient.sql` up to two of its own once used. Default 10.
   */
  readonly maxConnections?: number | undefined
  /** Close pooled connections idle for this long. Default: never. */
  readonly idleTimeout?: Duration.Input | undefined
  /** Give up opening a connection after this long. Default 10 seconds. */
  readonly connectTimeout?: Duration.Input | undefined
  /**
   * How long building the layer keeps retrying its first query while the server cannot be reached
   * (refused, connection closed, backend terminated, server starting or shutting down), with a
   * backoff of 100 ms doubling to 5 s, to the end: the last pause is shortened so that an attempt is
   * made at the deadline. Bad credentials or an unknown database fail at once. Default 30 seconds
   * (as `AmqpConnection`'s); 0 tries once.
   */
  readonly startupTimeout?: Duration.Input | undefined
  /**
   * When the layer is released, statements still running get this long before their connections are
   * closed (idle connections close at once). Default 500 milliseconds.
   */
  readonly endTimeout?: Duration.Input | undefined
  /** `application_name` shown in `pg_stat_activity`. Default `"tidings"`. */
  readonly applicationName?: string | undefined
  /** Use named prepared statements. Turn off behind PgBouncer in transaction mode. Default true. */
  readonly prepare?: boolean | undefined
}

const PgConfigErrorBase: Schema.Class<
  PgConfigError,
  Schema.TaggedStruct<"PgConfigError", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<PgConfigError>()("PgConfigError", {
  message: Schema.String
})

/**
 * The configuration could not be used (bad URL, out-of-range number). Never contains credentials.
 * @since 0.1.0
 * @category errors
 */
export class PgConfigError extends PgConfigErrorBase {}

/**
 * What the {@link PgClient} service offers beyond `SqlClient`.
 * @since 0.1.0
 * @category models
 */
export interface PgClientShape {
  /**
   * A plain postgres.js instance (up to two connections of its own, opened on first use), for what
   * effect/sql does not cover (COPY, large objects). Its queries bypass `withTransaction`, spans,
   * interruption and the client's fault handling (and, as it does not fetch array types either, its
   * `reserve()` may wait for another query on a cold pool: porsager/postgres#751; `begin` is fine):
   * prefer `SqlClient` otherwise. Ending it ends the whole client.
   */
  readonly sql: postgres.Sql
  /**
   * Notifications sent to `channel`, as payload strings. LISTEN runs on a connection of its own,
   * shared by all channels. When that connection is lost the stream fails with a retryable
   * `SqlError`: listen again (e.g. `Effect.retry` with a backoff), and treat notifications as
   * wake-up hints, not as the data, since those sent in between are lost. UNLISTEN when the stream
   * ends.
   */
  readonly listen: (channel: string) => Stream.Stream<string, SqlError.SqlError>
  /**
   * `pg_notify(channel, payload)`. Inside `withTransaction` it joins the transaction, so listeners
   * only hear it once (and if) the transaction commits.
   */
  readonly notify: (channel: string, payload: string) => Effect.Effect<void, SqlError.SqlError>
}

const PgClientBase: Context.ServiceClass<PgClient, "@tidings/postgres/PgClient", PgClientShape> = Context.Service<
  PgClient,
  PgClientShape
>()("@tidings/postgres/PgClient")

/**
 * The Postgres-specific service; provided together with `SqlClient.SqlClient` by {@link layer}.
 * @since 0.1.0
 * @category services
 */
export class PgClient extends PgClientBase {}

/**
 * Whether retrying the failed work (as a whole, in a new transaction) may succeed: connection-level
 * failures (socket errors, postgres.js `CONNECTION_CLOSED` / `CONNECT_TIMEOUT` ..., SQLSTATE class
 * 08), server shutdown (57P01, 57P02, 57P03), serialization failure (40001) and deadlock (40P01).
 * Narrower than `SqlError.isRetryable`, which also retries lock and statement timeouts.
 * @since 0.1.0
 * @category predicates
 */
export const isRetryableSqlError = (error: SqlError.SqlError): boolean => {
  if (isRetryableCode(errorCode(error.reason.cause))) return true
  const tag = error.reason._tag
  return tag === "ConnectionError" || tag === "SerializationError" || tag === "DeadlockError"
}

/**
 * A jsonb parameter (`$n::jsonb`), for places where Postgres cannot infer the type from context,
 * e.g. ``sql`SELECT ${jsonb(value)} AS doc` ``. Columns and casts work without it.
 * @since 0.1.0
 * @category constructors
 */
export const jsonb = (value: unknown): Statement.Fragment => Statement.fragment([PgJson(value, undefined, undefined)])

interface PgJson extends Statement.Custom<"PgJson", unknown> {}
const PgJson = Statement.custom<PgJson>("PgJson")

/** The effect/sql compiler for Postgres: `$n` placeholders, double-quoted identifiers, {@link jsonb}. */
const makeCompiler = (): Statement.Compiler =>
  Statement.makeCompiler<PgJson>({
    dialect: "pg",
    placeholder: (index) => `$${index}`,
    onIdentifier: escape,
    onRecordUpdate: (placeholders, alias, columns, values, returning) => [
      `(values ${placeholders}) AS ${alias}${columns}${returning ? ` RETURNING ${returning[0]}` : ""}`,
      returning ? values.flat().concat(returning[1]) : values.flat()
    ],
    onCustom: (custom, placeholder) => {
      // JSON text: the jsonb serializer below sends strings untouched.
      const text = JSON.stringify(custom.paramA) ?? null
      return [`${placeholder(text)}::jsonb`, [text]]
    }
  })

const escape = Statement.defaultEscape("\"")

/**
 * json / jsonb handling. postgres.js' own serializer JSON-encodes whatever it gets, so the common
 * `${JSON.stringify(obj)}::jsonb` would store a JSON *string*; treating strings as JSON text (as
 * node-postgres does) makes both that and plain objects work.
 */
const jsonType: Record<string, postgres.PostgresType> = {
  json: {
    to: 3802,
    from: [114, 3802],
    serialize: (value: unknown) => typeof value === "string" ? value : JSON.stringify(value),
    parse: (text: string) => JSON.parse(text)
  }
}

/** Validates the config. The URL (which may hold a password) never appears in an error. */
const resolveConfig = (config: PgClientConfig): Effect.Effect<ResolvedConfig, PgConfigError> =>
  Effect.try({
    try: () =>
      resolve(
        { ...config, url: Redacted.isRedacted(config.url) ? Redacted.value(config.url) : config.url },
        globalThis.process?.env ?? {}
      ),
    catch: (error) =>
      new PgConfigError({
        message: `PgClient config: ${error instanceof InvalidSetting ? error.message : "invalid settings"}`
      })
  })

/** PostgreSQL says `ROLLBACK` to a `COMMIT` of a transaction in which a statement failed. */
const commit = (conn: SqlConnection.Connection): Effect.Effect<void, SqlError.SqlError> =>
  Effect.flatMap(
    conn.executeRaw("COMMIT", []),
    (result) =>
      (result as { readonly command?: unknown }).command === "ROLLBACK"
        ? Effect.fail(clientSqlError("COMMIT rolled back an aborted transaction", "commit"))
        : Effect.void
  )

/** Builds both services; every connection is closed when the scope closes. */
const make = Effect.fnUntraced(function*(config: PgClientConfig) {
  const resolved = yield* resolveConfig(config)
  const context = yield* Effect.context<never>()
  const sockets: SocketRegistry = new Set()
  // the array types of this database's own types, read when the client starts
  const arrayTypes: Array<ArrayType> = [...builtinArrayTypes]

  const options = {
    ...(resolved.idleTimeoutSeconds === undefined ? {} : { idle_timeout: resolved.idleTimeoutSeconds }),
    connect_timeout: resolved.connectTimeoutSeconds,
    prepare: resolved.prepare,
    connection: { application_name: resolved.applicationName },
    types: jsonType,
    // postgres.js would query the array types on every new connection without awaiting it: a
    // connection lost in that window ends the process (see internal/pgTypes.ts).
    fetch_types: false,
    transform: { undefined: null },
    // postgres.js prints notices with console.log by default
    onnotice: (notice: postgres.Notice) =>
      Effect.runForkWith(context)(
        Effect.logDebug("PgClient: notice", scrubString(String(notice["message"] ?? "")))
      )
  }
  /** One connection (see internal/pgPool.ts): its own postgres.js instance on a guarded socket. */
  const open = (onDead: () => void, onReady?: () => void, extra: postgres.Options<{}> = {}): postgres.Sql => {
    const sql = postgres(resolved.url, {
      ...options,
      ...extra,
      max: 1,
      ssl: false,
      // postgres.js clears its timers only on a close it never hears of (see internal/pgSocket.ts):
      // the socket keeps the connect timeout, the pool the idle timeout and the lifetime.
      connect_timeout: null,
      idle_timeout: null,
      max_lifetime: null,
      socket: socketFactory(resolved.target, sockets, onDead, onReady)
    } as unknown as postgres.Options<{}>) as unknown as postgres.Sql
    registerArrayTypes(sql, arrayTypes)
    return sql
  }
  const pool = makePool({
    size: resolved.maxConnections,
    open: (onDead, onReady) => open(onDead, onReady),
    ended: () => toSqlError(connectionError("CONNECTION_ENDED", resolved.target), "connect"),
    sockets,
    idleTimeoutMillis: resolved.idleTimeoutSeconds === undefined ? undefined : resolved.idleTimeoutSeconds * 1000,
    // as postgres.js: 30 to 60 minutes, so that connections are renewed but not all at once
    maxLifetimeMillis: () => (30 + Math.random() * 30) * 60_000
  })
  const listener = makeListener({
    open: (onDead, onNotify) => open(onDead, undefined, { onnotify: onNotify } as postgres.Options<{}>),
    target: resolved.target
  })

  // `PgClient.sql`: a plain postgres.js instance of its own, made on first use.
  let raw: postgres.Sql | undefined
  let rawInstance: postgres.Sql | undefined
  const rawSql = (): postgres.Sql => {
    if (raw !== undefined) return raw
    const instance = postgres(
      resolved.originalUrl,
      { ...options, max: 2 } as postgres.Options<{}>
    ) as unknown as postgres.Sql
    rawInstance = instance
    registerArrayTypes(instance, arrayTypes)
    // Ending it ends the whole client, as when it was the client's own pool.
    raw = new Proxy(instance, {
      get: (target, key, receiver) =>
        key === "end"
          ? (options?: { timeout?: number }) => Promise.all([target.end(options), shutdown(0)]).then(() => {})
          : Reflect.get(target, key, receiver)
    })
    return raw
  }

  let closing: Promise<void> | undefined
  const shutdown = (graceMillis: number): Promise<void> =>
    closing ??= Promise.all([
      rawInstance?.end({ timeout: 0 }).catch(() => {}),
      Promise.resolve(listener.close()),
      pool.close(graceMillis)
    ]).then(() => closeSockets(sockets))
  yield* Effect.addFinalizer(() => Effect.promise(() => shutdown(resolved.endTimeoutMillis)))

  const queryOptions: QueryOptions = {
    prepare: resolved.prepare,
    cancelWaitMillis: Math.min(resolved.connectTimeoutSeconds * 1000, 10_000)
  }
  const poolConnection = makeConnection(poolAccess(pool), queryOptions)

  const client = yield* SqlClient.make({
    acquirer: Effect.succeed(poolConnection),
    // Pool statements need no scope of their own: each takes a connection for itself.
    borrower: (f) => f(poolConnection),
    // One connection per transaction, the wait for it interruptible (see internal/pgPool.ts).
    transactionAcquirer: Effect.map(pool.hold, (held) => makeConnection(heldAccess(held), queryOptions)),
    compiler: makeCompiler(),
    driver: "postgres-js",
    spanAttributes: [
      ["db.system.name", "postgresql"],
      ["db.namespace", resolved.database],
      ["server.address", resolved.host],
      ["server.port", resolved.port]
    ],
    commit,
    releaseSavepoint: (name) => `RELEASE SAVEPOINT ${name}`,
    // After a connection loss there is no transaction left to roll back, and trying would turn the
    // (retryable) connection error into a defect.
    isTransaction: (conn) => !(conn as PgConnection).broken()
  })

  // Fail the layer now rather than at the first query: bad host, bad password, server down. The
  // query reads the array types the database defines itself (enums, domains, ...), once. A server
  // that cannot be reached (or is restarting, or terminates the backend) is retried until
  // `startupTimeout`: a worker started during an outage waits for the database instead of exiting.
  const firstQuery = poolConnection.executeUnprepared(userArrayTypesQuery, [], undefined).pipe(
    Effect.mapError((error) =>
      // a failure without a SQLSTATE (postgres.js' or Node's own at connect: refused, TLS) is the
      // connection's; an unknown database (3D000) is not
      error.reason._tag === "UnknownError" && !/^[0-9A-Z]{5}$/.test(errorCode(error.reason.cause) ?? "")
        ? new SqlError.SqlError({
          reason: new SqlError.ConnectionError({
            cause: error.reason.cause,
            message: error.reason.message,
            operation: "connect"
          })
        })
        : error
    )
  )
  const userArrays = yield* retryUntil(firstQuery, resolved.startupTimeoutMillis)
  arrayTypes.push(...(userArrays as ReadonlyArray<ArrayType>))
  // connections opened before this (the one that ran the query) learn them as well
  yield* pool.withLink((link) => Effect.sync(() => registerArrayTypes(link.sql, arrayTypes)))

  const notify = (channel: string, payload: string): Effect.Effect<void, SqlError.SqlError> =>
    Effect.asVoid(client`SELECT pg_notify(${channel}, ${payload})`)

  const pg: PgClientShape = {
    get sql() {
      return rawSql()
    },
    listen: listener.listen,
    notify
  }
  return { client, pg: PgClient.of(pg) }
})

const fromResolved = <E, R>(config: Effect.Effect<PgClientConfig, E, R>) =>
  Layer.effectContext(
    Effect.gen(function*() {
      const { client, pg } = yield* make(yield* config)
      return Context.make(PgClient, pg).pipe(Context.add(SqlClient.SqlClient, client))
    })
  ).pipe(Layer.provide(Reactivity.layer))

/**
 * Provides {@link PgClient} and `SqlClient.SqlClient` on one pool of connections. Building it checks
 * the server with a first query; releasing it closes every connection (statements still running get
 * `endTimeout`, 500 ms by default).
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  config: PgClientConfig
): Layer.Layer<PgClient | SqlClient.SqlClient, PgConfigError | SqlError.SqlError> =>
  fromResolved(Effect.succeed(config))

/**
 * The settings of {@link PgClientConfig} as a schema (the URL a secret), read from the environment
 * by {@link layerConfig}.
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema = Environment.ClientSchema

/**
 * The client's environment variables: `TIDINGS_PG_URL` (a secret), `TIDINGS_PG_MAX_CONNECTIONS`,
 * `TIDINGS_PG_IDLE_TIMEOUT`, `TIDINGS_PG_CONNECT_TIMEOUT`, `TIDINGS_PG_STARTUP_TIMEOUT`, `TIDINGS_PG_END_TIMEOUT`,
 * `TIDINGS_PG_APPLICATION_NAME`, `TIDINGS_PG_PREPARE`.
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = Environment.client

/**
 * {@link layer} with its settings from the environment (`TIDINGS_PG_*`, or `options.prefix`) on
 * top of `options.defaults`; a wrong variable fails with one `InvalidConfig` naming every wrong
 * variable. Or, given a `Config.Wrap`, with each setting read from its own `Config`.
 * @since 0.1.0
 * @category layers
 */
export function layerConfig(
  options?: Settings.EnvironmentOptions<Partial<PgClientConfig>>
): Layer.Layer<PgClient | SqlClient.SqlClient, InvalidConfig | PgConfigError | SqlError.SqlError>
export function layerConfig(
  config: Config.Wrap<PgClientConfig>
): Layer.Layer<PgClient | SqlClient.SqlClient, Config.ConfigError | PgConfigError | SqlError.SqlError>
export function layerConfig(
  config: Config.Wrap<PgClientConfig> | Settings.EnvironmentOptions<Partial<PgClientConfig>> = {}
): Layer.Layer<PgClient | SqlClient.SqlClient, InvalidConfig | Config.ConfigError | PgConfigError | SqlError.SqlError> {
  if ("url" in config) return fromResolved(Config.unwrap(config as Config.Wrap<PgClientConfig>))
  const options = config as Settings.EnvironmentOptions<Partial<PgClientConfig>>
  return fromResolved(Settings.read(environment, options))
}

/**
 * A readiness check (`Health.Check`) named `postgres`: `SELECT 1` on the app's `SqlClient` (this
 * package's or any other driver's). Down when the query fails, e.g. the server is unreachable.
 * @since 0.1.0
 * @category health
 */
export const readiness: Health.Check<SqlClient.SqlClient> = Health.make(
  "postgres",
  SqlClient.SqlClient.use((sql) => Effect.asVoid(sql`SELECT 1`))
)
