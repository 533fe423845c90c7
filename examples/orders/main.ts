/**
 * The orders service (`node examples/orders/main.ts`, or `deno run -A examples/orders/main.ts`):
 * starts PostgreSQL (embedded unless TIDINGS_PG_URL is set) and the service on a free port of
 * 127.0.0.1, with the in-memory broker (or RabbitMQ with TIDINGS_AMQP_URL); then either runs the
 * demo — places orders over HTTP, shows their sagas progress, retries a refused event through the
 * admin routes, prints a summary — and exits 0, or, with `--serve`, keeps serving until Ctrl-C.
 * See settings.ts for every option.
 */
import { Runtime, Serve } from "@tidings/hono"
import { Effect, Layer, Redacted, References } from "effect"
import * as App from "./app.ts"
import * as Demo from "./demo.ts"
import * as Domain from "./domain.ts"
import * as Settings from "./settings.ts"
import * as Transport from "./transport.ts"

const say = (line: string) => console.log(`[orders] ${line}`)

/** Resolves on the first SIGINT or SIGTERM. */
const signalled = () =>
  new Promise<string>((resolve) => {
    process.once("SIGINT", () => resolve("SIGINT"))
    process.once("SIGTERM", () => resolve("SIGTERM"))
  })

/**
 * Starts the embedded PostgreSQL of the repository's test support (imported only when needed).
 * Its module installs signal handlers that stop the server and exit at once (code 130/143); they are
 * removed, because this process stops the server itself, last, after the HTTP server and the
 * runtime, and exits 0.
 */
const startEmbeddedPostgres = async () => {
  const signals = ["SIGHUP", "SIGINT", "SIGTERM", "SIGBREAK"] as const
  const before = new Map(signals.map((s) => [s, new Set(process.listeners(s))]))
  const { startPostgres } = await import("../../test/support/embeddedPostgres.ts")
  for (const s of signals) for (const l of process.listeners(s)) if (!before.get(s)!.has(l)) process.off(s, l)
  return startPostgres()
}

const main = async (): Promise<number> => {
  let settings: Settings.Settings
  try {
    const parsed = Settings.parse(process.argv.slice(2), process.env)
    if (parsed === "help") {
      console.log(Settings.usage)
      return 0
    }
    settings = parsed
  } catch (error) {
    if (error instanceof Settings.SettingsError) {
      console.error(`[orders] ${error.setting} ${error.message}`)
      return 2
    }
    throw error
  }

  const started = Date.now()
  const cleanups: Array<() => Promise<void>> = []
  const cleanup = async () => {
    for (const f of cleanups.reverse()) await f().catch((e) => console.error("[orders] cleanup failed:", e))
  }
  // Ctrl-C during start-up still removes the embedded server.
  let interrupted = false
  let stoppedCleanly = false
  const stopping = signalled().then((signal) => {
    interrupted = true
    return signal
  })
  try {
    let pgUrl = settings.pgUrl
    if (pgUrl === undefined) {
      say("starting PostgreSQL (embedded; set TIDINGS_PG_URL to use a server of yours) ...")
      const pg = await startEmbeddedPostgres()
      cleanups.push(pg.stop)
      pgUrl = Redacted.make(pg.url)
      say(`PostgreSQL ready in ${Date.now() - started} ms (embedded, ${new URL(pg.url).host}, removed on exit)`)
    } else {
      say(`PostgreSQL: ${new URL(Redacted.value(pgUrl)).host} (TIDINGS_PG_URL)`)
    }
    if (interrupted) return 130
    const transport: Transport.Transport = settings.amqpUrl === undefined
      ? { _tag: "memory" }
      : { _tag: "rabbitmq", url: settings.amqpUrl, prefix: `tidings.${settings.schema}` }
    const layer = App.layer({ pgUrl, schema: settings.schema, transport }).pipe(
      Layer.provide(Layer.succeed(References.MinimumLogLevel, settings.logLevel))
    )
    const rt = await Runtime.make(layer)
    cleanups.push(rt.dispose)
    const broker = await rt.runPromise(Transport.Broker.use((b) => Effect.succeed(b.description)))
    say(`broker: ${broker}${transport._tag === "memory" ? " (set TIDINGS_AMQP_URL=amqp://... for RabbitMQ)" : ""}; schema "${settings.schema}"`)
    const server = await Serve.serve(App.routes(rt, { schema: settings.schema, adminToken: settings.adminToken }), { port: settings.port, hostname: "127.0.0.1" })
    cleanups.push(server.close)
    say(`listening on ${server.url} (ready in ${Date.now() - started} ms)`)

    if (settings.serve) {
      say(`admin token: ${settings.tokenGenerated ? Redacted.value(settings.adminToken) : "(from TIDINGS_ADMIN_TOKEN)"}`)
      say(`console: ${server.url}/admin/console (asks for the admin token)`)
      say(`try: curl -s -XPOST ${server.url}/orders -H 'content-type: application/json' -d '{"customer":"ada","sku":"book","quantity":1,"amountCents":1299}'`)
      say(`     curl -s ${server.url}/orders   |   curl -s ${server.url}/metrics   |   curl -s -H 'authorization: Bearer <token>' ${server.url}/admin/outbox/stats`)
      say("serving; Ctrl-C stops")
      say(`stopping (${await stopping})`)
      // Said after the finally below has closed the server, the runtime and the database.
      stoppedCleanly = true
      return 0
    }
    const orders = Domain.make(settings.schema)
    const demo = Demo.run({
      url: server.url,
      adminToken: Redacted.value(settings.adminToken),
      say,
      eventCounts: () => rt.runPromise(orders.eventCounts)
    })
    return await Promise.race([demo.then(() => 0), stopping.then((signal) => (say(`stopping (${signal})`), 130))])
  } finally {
    await cleanup()
    if (stoppedCleanly) say("stopped")
  }
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error("[orders] failed:", error instanceof Demo.DemoError ? error.message : error)
    process.exit(1)
  }
)
