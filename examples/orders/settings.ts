/**
 * The service's settings, from the command line and the environment:
 *
 * | setting | default | meaning |
 * |---|---|---|
 * | `--serve` | off | keep serving (print the URL and the admin token) instead of running the demo and exiting |
 * | `--port N` / `TIDINGS_PORT` | 0 (a free port) | the HTTP port, on 127.0.0.1 |
 * | `TIDINGS_PG_URL` | an embedded PostgreSQL | the database |
 * | `TIDINGS_AMQP_URL` | the in-memory broker | RabbitMQ |
 * | `TIDINGS_SCHEMA` | `orders` | the schema of Tidings' tables and the service's |
 * | `TIDINGS_ADMIN_TOKEN` | generated and printed | the bearer token of the admin routes |
 * | `TIDINGS_LOG_LEVEL` | `Warn` | Effect's minimum log level (`Debug`, `Info`, `Warn`, `Error`, `None`) |
 */
import { Redacted, Schema } from "effect"

/** A setting that cannot be used; the process exits with code 2 and this message. */
export class SettingsError extends Schema.TaggedError<SettingsError>()("SettingsError", {
  setting: Schema.String,
  message: Schema.String
}) {}

/** The parsed settings. */
export interface Settings {
  readonly serve: boolean
  readonly port: number
  readonly pgUrl: Redacted.Redacted<string> | undefined
  readonly amqpUrl: Redacted.Redacted<string> | undefined
  readonly schema: string
  readonly adminToken: Redacted.Redacted<string>
  /** True when the token was generated (so it is printed). */
  readonly tokenGenerated: boolean
  readonly logLevel: "Debug" | "Info" | "Warn" | "Error" | "None"
}

/** The usage text for `--help`. */
export const usage = `Usage: node examples/orders/main.ts [--serve] [--port N]
       deno run -A examples/orders/main.ts [--serve] [--port N]

Without --serve: starts the service, places a few orders over HTTP, prints what happened, exits.
With --serve: keeps serving until Ctrl-C.

Environment: TIDINGS_PG_URL (default: embedded PostgreSQL), TIDINGS_AMQP_URL (default: in-memory
broker), TIDINGS_SCHEMA (default orders), TIDINGS_ADMIN_TOKEN (default: generated), TIDINGS_PORT,
TIDINGS_LOG_LEVEL (default Warn).`

const nonEmpty = (value: string | undefined) => value === undefined || value.trim() === "" ? undefined : value.trim()

const parsePort = (setting: string, raw: string): number => {
  const port = /^\d{1,5}$/.test(raw) ? Number(raw) : NaN
  if (!Number.isInteger(port) || port > 65535) throw new SettingsError({ setting, message: `must be a port number from 0 to 65535, got ${JSON.stringify(raw)}` })
  return port
}

const parseUrl = (setting: string, raw: string, protocols: ReadonlyArray<string>): Redacted.Redacted<string> => {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    // The value may hold a password: never echo it.
    throw new SettingsError({ setting, message: "is not a URL" })
  }
  if (!protocols.includes(url.protocol)) throw new SettingsError({ setting, message: `must start with ${protocols.map((p) => `${p}//`).join(" or ")}` })
  return Redacted.make(raw)
}

const logLevels = ["Debug", "Info", "Warn", "Error", "None"] as const

/** A random admin token: 24 bytes, URL-safe base64. */
export const generateToken = (): string => {
  const bytes = crypto.getRandomValues(new Uint8Array(24))
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")
}

/**
 * Parses the arguments (without the runtime and script) and the environment. Throws
 * {@link SettingsError} for a setting that cannot be used, and `"help"` for `--help`.
 */
export const parse = (args: ReadonlyArray<string>, env: Readonly<Record<string, string | undefined>>): Settings | "help" => {
  let serve = false
  let port = nonEmpty(env["TIDINGS_PORT"]) === undefined ? 0 : parsePort("TIDINGS_PORT", nonEmpty(env["TIDINGS_PORT"])!)
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    if (arg === "--serve") serve = true
    else if (arg === "--help" || arg === "-h") return "help"
    else if (arg === "--port") {
      const value = args[++i]
      if (value === undefined) throw new SettingsError({ setting: "--port", message: "needs a value" })
      port = parsePort("--port", value)
    } else if (arg.startsWith("--port=")) port = parsePort("--port", arg.slice("--port=".length))
    else throw new SettingsError({ setting: arg, message: "is not an option (see --help)" })
  }
  const schema = nonEmpty(env["TIDINGS_SCHEMA"]) ?? "orders"
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    throw new SettingsError({ setting: "TIDINGS_SCHEMA", message: "must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 63 characters)" })
  }
  const pg = nonEmpty(env["TIDINGS_PG_URL"])
  const amqp = nonEmpty(env["TIDINGS_AMQP_URL"])
  const token = nonEmpty(env["TIDINGS_ADMIN_TOKEN"])
  if (token !== undefined && (token.length < 32 || /\s/.test(token))) {
    throw new SettingsError({ setting: "TIDINGS_ADMIN_TOKEN", message: "must be at least 32 characters without spaces (e.g. openssl rand -base64 24)" })
  }
  const level = nonEmpty(env["TIDINGS_LOG_LEVEL"]) ?? "Warn"
  const logLevel = logLevels.find((l) => l.toLowerCase() === level.toLowerCase())
  if (logLevel === undefined) throw new SettingsError({ setting: "TIDINGS_LOG_LEVEL", message: `must be one of ${logLevels.join(", ")}` })
  return {
    serve,
    port,
    pgUrl: pg === undefined ? undefined : parseUrl("TIDINGS_PG_URL", pg, ["postgres:", "postgresql:"]),
    amqpUrl: amqp === undefined ? undefined : parseUrl("TIDINGS_AMQP_URL", amqp, ["amqp:", "amqps:"]),
    schema,
    adminToken: Redacted.make(token ?? generateToken()),
    tokenGenerated: token === undefined,
    logLevel
  }
}
