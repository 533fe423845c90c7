/**
 * The service's settings: `--serve` and `--port N` on the command line, everything else from the
 * components' own `TIDINGS_*` variables (the root README's configuration table), read in one go
 * with `Settings.all`, so that a wrong configuration stops the start with one error naming every
 * wrong variable. What the demo sets differently from the components' defaults is given in code
 * (the variables win over it):
 *
 * | setting | default here | meaning |
 * |---|---|---|
 * | `--serve` | off | keep serving (print the URL and the admin token) instead of running the demo and exiting |
 * | `--port N` / `TIDINGS_HTTP_PORT` | 0 (a free port) | the HTTP port (`TIDINGS_HTTP_HOSTNAME`: 127.0.0.1) |
 * | `TIDINGS_PG_URL` (and `TIDINGS_PG_*`) | an embedded PostgreSQL | the database |
 * | `TIDINGS_AMQP_URL` (and `TIDINGS_AMQP_*`) | the in-memory broker | RabbitMQ |
 * | `TIDINGS_SCHEMA` | `orders` | the schema of Tidings' tables and the service's |
 * | `TIDINGS_ADMIN_TOKEN` | generated and printed | the bearer token of the admin routes |
 * | `TIDINGS_RELAY_*` | 2 pollers, quick polling and retries | the relay |
 * | `TIDINGS_LOG_LEVEL` | `Warn` | Effect's minimum log level (`Debug`, `Info`, `Warn`, `Error`, `None`) |
 */
import { Relay, Retry, Settings } from "@tidings/core"
import type { InvalidConfig } from "@tidings/core/Errors"
import { Auth, Serve } from "@tidings/hono"
import { PgClient, PgSagaStore } from "@tidings/postgres"
import { AmqpConnection } from "@tidings/rabbitmq"
import { Config, ConfigProvider, Effect, Option, Redacted, Schema } from "effect"

/** A command-line argument that cannot be used; the process exits with code 2 and this message. */
export class UsageError extends Schema.TaggedError<UsageError>()("UsageError", {
  setting: Schema.String,
  message: Schema.String
}) {}

/** The example's own variable: `TIDINGS_LOG_LEVEL`. */
export const LogSchema = Schema.Struct({
  logLevel: Schema.Literals(["Debug", "Info", "Warn", "Error", "None"]).pipe(
    Schema.withDecodingDefault(Effect.succeed("Warn" as const))
  )
})

/** The parsed settings. */
export interface Settings {
  readonly serve: boolean
  readonly http: Serve.Options
  /** `undefined`: start an embedded PostgreSQL. */
  readonly pg: PgClient.PgClientConfig | undefined
  /** `undefined`: the in-memory broker. */
  readonly amqp: AmqpConnection.Config | undefined
  readonly schema: string
  readonly relay: Relay.Config
  readonly adminToken: Redacted.Redacted<string>
  /** True when the token was generated (so it is printed). */
  readonly tokenGenerated: boolean
  readonly logLevel: typeof LogSchema.Type["logLevel"]
}

/** The usage text for `--help`. */
export const usage = `Usage: node examples/orders/main.ts [--serve] [--port N]
       deno run -A examples/orders/main.ts [--serve] [--port N]

Without --serve: starts the service, places a few orders over HTTP, prints what happened, exits.
With --serve: keeps serving until Ctrl-C.

Environment: the TIDINGS_* variables of the README's configuration table, e.g. TIDINGS_PG_URL
(default: embedded PostgreSQL), TIDINGS_AMQP_URL (default: in-memory broker), TIDINGS_SCHEMA
(default orders), TIDINGS_ADMIN_TOKEN (default: generated), TIDINGS_HTTP_PORT, TIDINGS_RELAY_*,
and TIDINGS_LOG_LEVEL (default Warn).`

/** A random admin token: 24 bytes, URL-safe base64. */
export const generateToken = (): string => {
  const bytes = crypto.getRandomValues(new Uint8Array(24))
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")
}

/** The demo's relay: quick polling and retries (a broker hiccup is retried fast; after 5 attempts the event fails, for the admin view). */
const relayDefaults: Relay.Config = {
  concurrency: 2,
  pollInterval: { base: "50 millis", max: "500 millis" },
  retry: Retry.exponentialBackoff({ base: "200 millis", max: "5 seconds" }),
  maxAttempts: 5,
  statsInterval: "1 second"
}

type Args = { readonly serve: boolean; readonly port: string | undefined } | "help"

const parseArgs = (args: ReadonlyArray<string>): Effect.Effect<Args, UsageError> =>
  Effect.suspend((): Effect.Effect<Args, UsageError> => {
    let serve = false
    let port: string | undefined
    const checkPort = (value: string) => /^\d{1,5}$/.test(value) && Number(value) <= 65535 ? value : undefined
    for (let i = 0; i < args.length; i++) {
      const arg = args[i]!
      if (arg === "--serve") serve = true
      else if (arg === "--help" || arg === "-h") return Effect.succeed("help" as const)
      else if (arg === "--port" || arg.startsWith("--port=")) {
        const value = arg === "--port" ? args[++i] : arg.slice("--port=".length)
        port = value === undefined ? undefined : checkPort(value)
        if (port === undefined) {
          return Effect.fail(
            new UsageError({
              setting: "--port",
              message: `must be a port number from 0 to 65535, got ${JSON.stringify(value ?? "")}`
            })
          )
        }
      } else return Effect.fail(new UsageError({ setting: arg, message: "is not an option (see --help)" }))
    }
    return Effect.succeed({ serve, port })
  })

const isSet = (name: string) =>
  Effect.map(Effect.option(Config.option(Config.String(name))), (o) => Option.isSome(Option.flatten(o)))

/**
 * Reads the arguments (without the runtime and script) and the environment (the current
 * `ConfigProvider`): `"help"` for `--help`, a {@link UsageError} for a bad argument, one
 * `InvalidConfig` naming every wrong variable.
 */
export const load = (args: ReadonlyArray<string>): Effect.Effect<Settings | "help", UsageError | InvalidConfig> =>
  Effect.gen(function*() {
    const cli = yield* parseArgs(args)
    if (cli === "help") return cli
    const [pgSet, amqpSet] = [yield* isSet("TIDINGS_PG_URL"), yield* isSet("TIDINGS_AMQP_URL")]
    const s = yield* Settings.all({
      pg: pgSet
        ? Settings.read(PgClient.environment, { defaults: { maxConnections: 12, applicationName: "tidings-orders" } })
        : Effect.succeed(undefined),
      amqp: amqpSet ? Settings.read(AmqpConnection.environment) : Effect.succeed(undefined),
      store: Settings.read(PgSagaStore.environment, { defaults: { schema: "orders" } }),
      relay: Relay.config({ defaults: relayDefaults }),
      // --port wins over TIDINGS_HTTP_PORT.
      http: cli.port === undefined
        ? Serve.config()
        : Serve.config().pipe(
          Effect.provide(
            ConfigProvider.layerAdd(ConfigProvider.fromUnknown({ TIDINGS_HTTP_PORT: cli.port }), { asPrimary: true })
          )
        ),
      token: Auth.config(),
      log: Settings.fromConfig(LogSchema, "TIDINGS")
    })
    return {
      serve: cli.serve,
      http: s.http,
      pg: s.pg,
      amqp: s.amqp,
      schema: s.store.schema,
      relay: s.relay,
      adminToken: s.token ?? Redacted.make(generateToken()),
      tokenGenerated: s.token === undefined,
      logLevel: s.log.logLevel
    }
  })
