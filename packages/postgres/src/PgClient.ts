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
 * server cannot infer json (e.g. `SELECT ${x}`), use {@link jsonb}.
 *
 * @module
 */
import * as Health from "@tidings/core/Health"
import { Config, Context, Duration, Effect, Layer, Option, Queue, Redacted, Schema, type Scope, Stream } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient, type SqlConnection, SqlError, Statement } from "effect/sql"
import postgres from "postgres"
import { type PgConnection, makeConnection, type QueryOptions } from "./internal/pgConnection.ts"
import { clientSqlError, errorCode, isRetryableCode, scrubString, toSqlError } from "./internal/pgError.ts"
import * as Environment from "./internal/environment.ts"
import * as Settings from "@tidings/core/Settings"
import type { InvalidConfig } from "@tidings/core/Errors"

/** Settings of {@link layer}. Only `url` is required. */
export interface PgClientConfig {
  /** `postgres://user:password@host:port/database?sslmode=...`; wrap it in `Redacted` where it is read. */
  readonly url: Redacted.Redacted<string> | string
  /** Size of the pool; an open transaction holds one of them. `listen` uses one more, outside it. Default 10. */
  readonly maxConnections?: number | undefined
  /** Close pooled connections idle for this long. Default: never. */
  readonly idleTimeout?: Duration.Input | undefined
  /** Give up opening a connection after this long. Default 10 seconds. */
  readonly connectTimeout?: Duration.Input | undefined
  /** `application_name` shown in `pg_stat_activity`. Default `"tidings"`. */
  readonly applicationName?: string | undefined
  /** Use named prepared statements. Turn off behind PgBouncer in transaction mode. Default true. */
  readonly prepare?: boolean | undefined
}

/** The configuration could not be used (bad URL, out-of-range number). Never contains credentials. */
export class PgConfigError extends Schema.TaggedError<PgConfigError>()("PgConfigError", {
  message: Schema.String
}) {}

/** What the {@link PgClient} service offers beyond `SqlClient`. */
export interface PgClientShape {
  /**
   * The underlying postgres.js instance, for what effect/sql does not cover (COPY, large objects).
   * Its queries bypass `withTransaction`, spans and interruption: prefer `SqlClient` otherwise.
   */
  readonly sql: postgres.Sql
  /**
   * Notifications sent to `channel`, as payload strings. LISTEN runs on a dedicated connection that
   * postgres.js re-establishes (and re-LISTENs) after a connection loss; notifications sent while it
   * was down are lost, so use them as wake-up hints, not as the data. UNLISTEN when the stream ends.
   */
  readonly listen: (channel: string) => Stream.Stream<string, SqlError.SqlError>
  /**
   * `pg_notify(channel, payload)`. Inside `withTransaction` it joins the transaction, so listeners
   * only hear it once (and if) the transaction commits.
   */
  readonly notify: (channel: string, payload: string) => Effect.Effect<void, SqlError.SqlError>
}

/** The Postgres-specific service; provided together with `SqlClient.SqlClient` by {@link layer}. */
export class PgClient extends Context.Service<PgClient, PgClientShape>()("@tidings/postgres/PgClient") {}

/**
 * Whether retrying the failed work (as a whole, in a new transaction) may succeed: connection-level
 * failures (socket errors, postgres.js `CONNECTION_CLOSED` / `CONNECT_TIMEOUT` ..., SQLSTATE class
 * 08), server shutdown (57P01, 57P02, 57P03), serialization failure (40001) and deadlock (40P01).
 * Narrower than `SqlError.isRetryable`, which also retries lock and statement timeouts.
 */
export const isRetryableSqlError = (error: SqlError.SqlError): boolean => {
  if (isRetryableCode(errorCode(error.reason.cause))) return true
  const tag = error.reason._tag
  return tag === "ConnectionError" || tag === "SerializationError" || tag === "DeadlockError"
}

/**
 * A jsonb parameter (`$n::jsonb`), for places where Postgres cannot infer the type from context,
 * e.g. ``sql`SELECT ${jsonb(value)} AS doc` ``. Columns and casts work without it.
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

interface ResolvedConfig {
  readonly url: string
  readonly secrets: ReadonlyArray<string>
  readonly host: string
  readonly port: number
  readonly database: string
  readonly maxConnections: number
  readonly idleTimeoutSeconds: number | undefined
  readonly connectTimeoutSeconds: number
  readonly applicationName: string
  readonly prepare: boolean
}

const invalid = (message: string) => Effect.fail(new PgConfigError({ message: `PgClient config: ${message}` }))

const seconds = (name: string, input: Duration.Input | undefined, fallback: number | undefined, min: number) => {
  if (input === undefined) return Effect.succeed(fallback)
  const duration = Duration.fromInput(input)
  if (Option.isNone(duration)) return invalid(`${name} is not a duration`)
  const value = Duration.toSeconds(duration.value)
  return Number.isFinite(value) && value >= min ? Effect.succeed(value) : invalid(`${name} is out of range`)
}

/** Validates the config. The URL (which may hold a password) never appears in an error. */
const resolveConfig = (config: PgClientConfig): Effect.Effect<ResolvedConfig, PgConfigError> =>
  Effect.gen(function*() {
    const raw: unknown = Redacted.isRedacted(config.url) ? Redacted.value(config.url) : config.url
    if (typeof raw !== "string" || !/^postgres(ql)?:\/\//i.test(raw)) {
      return yield* invalid("url must be a postgres:// or postgresql:// URL")
    }
    let url: URL
    try {
      url = new URL(raw)
    } catch {
      // The URL error's message and `input` would repeat the URL, password included.
      return yield* invalid("url is not a valid URL (multi-host URLs are not supported)")
    }
    const secrets = new Set<string>()
    if (url.password !== "") {
      secrets.add(url.password)
      try {
        secrets.add(decodeURIComponent(url.password))
      } catch {
        // keep the encoded form only
      }
    }
    const envPassword = globalThis.process?.env?.["PGPASSWORD"]
    if (url.password === "" && envPassword !== undefined && envPassword !== "") secrets.add(envPassword)
    const maxConnections = config.maxConnections ?? 10
    if (!Number.isInteger(maxConnections) || maxConnections < 1) {
      return yield* invalid("maxConnections must be an integer >= 1")
    }
    const applicationName = config.applicationName ?? "tidings"
    if (typeof applicationName !== "string") return yield* invalid("applicationName must be a string")
    const prepare = config.prepare ?? true
    if (typeof prepare !== "boolean") return yield* invalid("prepare must be a boolean")
    const idleTimeoutSeconds = yield* seconds("idleTimeout", config.idleTimeout, undefined, 0)
    const connectTimeoutSeconds = (yield* seconds("connectTimeout", config.connectTimeout, 10, 0.001)) ?? 10
    let database = url.pathname.replace(/^\//, "")
    try {
      database = decodeURIComponent(database)
    } catch {
      // keep it encoded
    }
    return {
      url: raw,
      secrets: [...secrets].sort((a, b) => b.length - a.length),
      host: url.hostname === "" ? "localhost" : url.hostname,
      port: url.port === "" ? 5432 : Number(url.port),
      database: database === "" ? "postgres" : database,
      maxConnections,
      idleTimeoutSeconds,
      connectTimeoutSeconds,
      applicationName,
      prepare
    }
  })

/** PostgreSQL says `ROLLBACK` to a `COMMIT` of a transaction in which a statement failed. */
const commit = (conn: SqlConnection.Connection): Effect.Effect<void, SqlError.SqlError> =>
  Effect.flatMap(conn.executeRaw("COMMIT", []), (result) =>
    (result as { readonly command?: unknown }).command === "ROLLBACK"
      ? Effect.fail(clientSqlError("COMMIT rolled back an aborted transaction", "commit"))
      : Effect.void)

/** Builds both services; the postgres.js pool is ended when the scope closes. */
const make = Effect.fnUntraced(function*(config: PgClientConfig) {
  const resolved = yield* resolveConfig(config)
  const { secrets } = resolved
  const context = yield* Effect.context<never>()
  const sql = yield* Effect.acquireRelease(
    Effect.try({
      try: () =>
        postgres(resolved.url, {
          max: resolved.maxConnections,
          ...(resolved.idleTimeoutSeconds === undefined ? {} : { idle_timeout: resolved.idleTimeoutSeconds }),
          connect_timeout: resolved.connectTimeoutSeconds,
          prepare: resolved.prepare,
          connection: { application_name: resolved.applicationName },
          types: jsonType,
          transform: { undefined: null },
          // postgres.js prints notices with console.log by default
          onnotice: (notice) =>
            Effect.runForkWith(context)(
              Effect.logDebug("PgClient: notice", scrubString(String(notice["message"] ?? ""), secrets))
            )
        }) as unknown as postgres.Sql,
      catch: (error) =>
        new PgConfigError({
          message: `PgClient config: ${scrubString(error instanceof Error ? error.message : String(error), secrets)}`
        })
    }),
    // A grace period for in-flight queries, then postgres.js destroys the sockets.
    (sql) => Effect.promise(() => sql.end({ timeout: 5 }).catch(() => {}))
  )

  const queryOptions: QueryOptions = {
    prepare: resolved.prepare,
    secrets,
    cancelWaitMillis: Math.min(resolved.connectTimeoutSeconds * 1000, 10_000)
  }
  const pool = makeConnection(sql, queryOptions)

  // One reserved connection per transaction (and per `sql.reserve`). The wait for a free connection
  // is interruptible; a connection that arrives after the waiter gave up goes back to the pool.
  const reserve: Effect.Effect<PgConnection, SqlError.SqlError, Scope.Scope> = Effect.acquireRelease(
    Effect.callback<readonly [postgres.ReservedSql, PgConnection], SqlError.SqlError>((resume) => {
      let abandoned = false
      let delivered: postgres.ReservedSql | undefined
      sql.reserve().then(
        (reserved) => {
          if (abandoned) return reserved.release()
          delivered = reserved
          resume(Effect.succeed([reserved, makeConnection(reserved, queryOptions, true)] as const))
        },
        (error: unknown) => resume(Effect.fail(toSqlError(error, "reserve", secrets)))
      )
      return Effect.sync(() => {
        abandoned = true
        delivered?.release()
      })
    }),
    // A connection whose socket was lost is already back in postgres.js' closed queue, and handing
    // it to the idle queue again would make the pool write to a dead socket.
    ([reserved, connection]) => Effect.sync(() => connection.broken() ? undefined : reserved.release()),
    { interruptible: true }
  ).pipe(Effect.map(([, connection]) => connection))

  const client = yield* SqlClient.make({
    acquirer: Effect.succeed(pool),
    // Pool statements need no scope of their own: postgres.js picks a connection per query.
    borrower: (f) => f(pool),
    transactionAcquirer: reserve,
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

  // Fail the layer now rather than at the first query: bad host, bad password, server down.
  yield* pool.executeUnprepared("SELECT 1", [], undefined).pipe(
    Effect.mapError((error) =>
      error.reason._tag === "UnknownError"
        ? new SqlError.SqlError({
          reason: new SqlError.ConnectionError({ cause: error.reason.cause, message: error.reason.message, operation: "connect" })
        })
        : error
    )
  )

  const listen = (channel: string): Stream.Stream<string, SqlError.SqlError> =>
    Stream.callback<string, SqlError.SqlError>((queue) =>
      Effect.acquireRelease(
        Effect.tryPromise({
          try: () => sql.listen(channel, (payload) => void Queue.offerUnsafe(queue, payload)),
          catch: (error) => toSqlError(error, "listen", secrets)
        }),
        (meta) => Effect.promise(() => meta.unlisten().catch(() => {}))
      )
    )

  const notify = (channel: string, payload: string): Effect.Effect<void, SqlError.SqlError> =>
    Effect.asVoid(client`SELECT pg_notify(${channel}, ${payload})`)

  return { client, pg: PgClient.of({ sql, listen, notify }) }
})

const fromResolved = <E, R>(config: Effect.Effect<PgClientConfig, E, R>) =>
  Layer.effectContext(
    Effect.gen(function*() {
      const { client, pg } = yield* make(yield* config)
      return Context.make(PgClient, pg).pipe(Context.add(SqlClient.SqlClient, client))
    })
  ).pipe(Layer.provide(Reactivity.layer))

/**
 * Provides {@link PgClient} and `SqlClient.SqlClient` on one postgres.js pool. Building it checks the
 * server with `SELECT 1`; releasing it ends the pool (in-flight queries get 5 s).
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
 * `TIDINGS_PG_IDLE_TIMEOUT`, `TIDINGS_PG_CONNECT_TIMEOUT`, `TIDINGS_PG_APPLICATION_NAME`,
 * `TIDINGS_PG_PREPARE`.
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
 */
export const readiness: Health.Check<SqlClient.SqlClient> = Health.make(
  "postgres",
  SqlClient.SqlClient.use((sql) => Effect.asVoid(sql`SELECT 1`))
)
