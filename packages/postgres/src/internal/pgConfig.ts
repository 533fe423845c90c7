/**
 * Reading and checking the PgClient settings. Messages never contain the URL (it may hold a password).
 * @internal
 */
import { Duration, Option } from "effect"
import { type SocketTarget, tlsMode } from "./pgSocket.ts"

/** The settings as given (see `PgClientConfig`). */
export interface RawConfig {
  readonly url: unknown
  readonly maxConnections?: number | undefined
  readonly idleTimeout?: Duration.Input | undefined
  readonly connectTimeout?: Duration.Input | undefined
  readonly startupTimeout?: Duration.Input | undefined
  readonly endTimeout?: Duration.Input | undefined
  readonly applicationName?: string | undefined
  readonly prepare?: boolean | undefined
}

export interface ResolvedConfig {
  /** The URL for postgres.js: TLS settings removed (TLS is ours, see pgSocket.ts). */
  readonly url: string
  /** The URL as given, for the plain postgres.js instance `PgClient.sql`. */
  readonly originalUrl: string
  readonly target: SocketTarget
  readonly host: string
  readonly port: number
  readonly database: string
  readonly maxConnections: number
  readonly idleTimeoutSeconds: number | undefined
  readonly connectTimeoutSeconds: number
  readonly startupTimeoutMillis: number
  readonly endTimeoutMillis: number
  readonly applicationName: string
  readonly prepare: boolean
}

/** A setting that cannot be used. */
export class InvalidSetting {
  readonly message: string
  constructor(message: string) {
    this.message = message
  }
}

const seconds = (name: string, input: Duration.Input | undefined, fallback: number, min: number): number => {
  if (input === undefined) return fallback
  const duration = Duration.fromInput(input)
  if (Option.isNone(duration)) throw new InvalidSetting(`${name} is not a duration`)
  const value = Duration.toSeconds(duration.value)
  if (!Number.isFinite(value) || value < min) throw new InvalidSetting(`${name} is out of range`)
  return value
}

/** URL parameters that configure TLS (handled by pgSocket.ts, not sent to the server). */
const tlsParams = ["ssl", "sslmode", "sslrootcert", "sslcert", "sslkey", "sslnegotiation"]

/** Checks and resolves the settings; throws {@link InvalidSetting}. */
export const resolve = (config: RawConfig, env: Record<string, string | undefined>): ResolvedConfig => {
  const raw = config.url
  if (typeof raw !== "string" || !/^postgres(ql)?:\/\//i.test(raw)) {
    throw new InvalidSetting("url must be a postgres:// or postgresql:// URL")
  }
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    // The URL error's message and `input` would repeat the URL, password included.
    throw new InvalidSetting("url is not a valid URL (multi-host URLs are not supported)")
  }
  if (url.searchParams.has("target_session_attrs") || (env["PGTARGETSESSIONATTRS"] ?? "") !== "") {
    // postgres.js checks it with a query whose failure nobody handles (it would end the process)
    throw new InvalidSetting("target_session_attrs is not supported")
  }
  const maxConnections = config.maxConnections ?? 10
  if (!Number.isInteger(maxConnections) || maxConnections < 1) {
    throw new InvalidSetting("maxConnections must be an integer >= 1")
  }
  const applicationName = config.applicationName ?? "tidings"
  if (typeof applicationName !== "string") throw new InvalidSetting("applicationName must be a string")
  const prepare = config.prepare ?? true
  if (typeof prepare !== "boolean") throw new InvalidSetting("prepare must be a boolean")
  const idleTimeoutSeconds = config.idleTimeout === undefined
    ? undefined
    : seconds("idleTimeout", config.idleTimeout, 0, 0)
  const connectTimeoutSeconds = seconds("connectTimeout", config.connectTimeout, 10, 0.001)
  const startupTimeoutMillis = seconds("startupTimeout", config.startupTimeout, 30, 0) * 1000
  const endTimeoutMillis = seconds("endTimeout", config.endTimeout, 0.5, 0) * 1000
  let tls: SocketTarget["tls"]
  try {
    tls = tlsMode(url.searchParams, env)
  } catch (error) {
    throw new InvalidSetting(error instanceof Error ? error.message : "invalid TLS settings")
  }
  let database = url.pathname.replace(/^\//, "")
  try {
    database = decodeURIComponent(database)
  } catch {
    // keep it encoded
  }
  const host = url.hostname !== "" ? decodeURIComponent(url.hostname) : env["PGHOST"] ?? "localhost"
  const port = url.port !== "" ? Number(url.port) : Number(env["PGPORT"] ?? 5432)
  const sanitized = new URL(raw)
  for (const name of tlsParams) sanitized.searchParams.delete(name)
  return {
    url: sanitized.toString(),
    originalUrl: raw,
    target: {
      host,
      port,
      // a host that is a directory means a Unix socket, as in libpq and postgres.js
      path: host.startsWith("/") ? `${host}/.s.PGSQL.${port}` : undefined,
      tls,
      connectTimeoutMillis: connectTimeoutSeconds * 1000
    },
    host,
    port,
    database: database === "" ? "postgres" : database,
    maxConnections,
    idleTimeoutSeconds,
    connectTimeoutSeconds,
    startupTimeoutMillis,
    endTimeoutMillis,
    applicationName,
    prepare
  }
}
