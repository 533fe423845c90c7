/**
 * The orders service (`node examples/orders/main.ts`, or `deno run -A examples/orders/main.ts`):
 * starts PostgreSQL (embedded unless TIDINGS_PG_URL is set) and the service on a free port of
 * 127.0.0.1, with the in-memory broker (or RabbitMQ with TIDINGS_AMQP_URL); then either runs the
 * demo — places orders over HTTP, shows their sagas progress, retries a refused event through the
 * admin routes, prints a summary — and exits 0, or, with `--serve`, keeps serving until Ctrl-C
 * (or SIGTERM), then closes everything and exits 0.
 * See settings.ts for the options (the components' TIDINGS_* variables).
 */
import { Main } from "@tidings/core"
import { Runtime, Serve } from "@tidings/hono"
import { Effect, Layer, Redacted, References, Runtime as Runtime_ } from "effect"
import * as App from "./app.ts"
import * as Demo from "./demo.ts"
import * as Domain from "./domain.ts"
import * as Observability from "./observability.ts"
import * as Settings from "./settings.ts"
import * as Transport from "./transport.ts"

const say = (line: string) => console.log(`[orders] ${line}`)

/** A failure that ends the process with `code`, already reported (Main.runMain does not log it again). */
class Exit extends Error {
  override readonly [Runtime_.errorExitCode]: number
  override readonly [Runtime_.errorReported] = false
  constructor(code: number) {
    super(`exit ${code}`)
    this[Runtime_.errorExitCode] = code
  }
}

/**
 * The embedded PostgreSQL of the repository's test support (imported only when needed), stopped
 * when the scope closes: last, after the HTTP server and the runtime.
 */
const embeddedPostgres = Effect.acquireRelease(
  Effect.promise(() => import("../../test/support/embeddedPostgres.ts").then((m) => m.startPostgres())),
  (pg) => Effect.promise(() => pg.stop())
)

const main = Effect.gen(function*() {
  const loaded = yield* Settings.load(process.argv.slice(2)).pipe(
    Effect.catch((error) => {
      console.error(
        `[orders] ${
          error._tag === "UsageError" ? `${error.setting} ${error.message}` : `invalid settings: ${error.message}`
        }`
      )
      return Effect.die(new Exit(2))
    })
  )
  if (loaded === "help") return console.log(Settings.usage)
  const settings = loaded

  const started = Date.now()
  let pg = settings.pg
  if (pg === undefined) {
    say("starting PostgreSQL (embedded; set TIDINGS_PG_URL to use a server of yours) ...")
    const embedded = yield* embeddedPostgres
    pg = { url: Redacted.make(embedded.url), maxConnections: 12, applicationName: "tidings-orders" }
    say(`PostgreSQL ready in ${Date.now() - started} ms (embedded, ${new URL(embedded.url).host}, removed on exit)`)
  } else {
    say(`PostgreSQL: ${new URL(Redacted.isRedacted(pg.url) ? Redacted.value(pg.url) : pg.url).host} (TIDINGS_PG_URL)`)
  }
  const transport: Transport.Transport = settings.amqp === undefined
    ? { _tag: "memory" }
    : { _tag: "rabbitmq", connection: settings.amqp, prefix: `tidings.${settings.schema}` }
  const layer = App.layer({ pg, schema: settings.schema, transport, relay: settings.relay }).pipe(
    // OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set (observability.ts); provided to the app's
    // layers so that the relay's and the consumers' fibers trace too, and kept for the handlers.
    Layer.provideMerge(Observability.layer),
    Layer.provide(Layer.succeed(References.MinimumLogLevel, settings.logLevel))
  )
  const rt = yield* Effect.acquireRelease(
    Effect.promise(() => Runtime.make(layer)),
    (rt) => Effect.promise(() => rt.dispose())
  )
  const broker = yield* Effect.promise(() => rt.runPromise(Transport.Broker.use((b) => Effect.succeed(b.description))))
  say(
    `broker: ${broker}${
      transport._tag === "memory" ? " (set TIDINGS_AMQP_URL=amqp://... for RabbitMQ)" : ""
    }; schema "${settings.schema}"`
  )
  const server = yield* Effect.acquireRelease(
    Effect.promise(() =>
      Serve.serve(App.routes(rt, { schema: settings.schema, adminToken: settings.adminToken }), settings.http)
    ),
    (server) => Effect.promise(() => server.close())
  )
  say(`listening on ${server.url} (ready in ${Date.now() - started} ms)`)

  if (settings.serve) {
    say(`admin token: ${settings.tokenGenerated ? Redacted.value(settings.adminToken) : "(from TIDINGS_ADMIN_TOKEN)"}`)
    say(`console: ${server.url}/admin/console (asks for the admin token)`)
    say(
      `try: curl -s -XPOST ${server.url}/orders -H 'content-type: application/json' -d '{"customer":"ada","sku":"book","quantity":1,"amountCents":1299}'`
    )
    say(
      `     curl -s ${server.url}/orders   |   curl -s ${server.url}/metrics   |   curl -s -H 'authorization: Bearer <token>' ${server.url}/admin/outbox/stats`
    )
    say("serving; Ctrl-C stops")
    return yield* Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => say("stopping"))))
  }
  const orders = Domain.make(settings.schema)
  yield* Effect.tryPromise({
    try: (signal) =>
      Demo.run({
        url: server.url,
        adminToken: Redacted.value(settings.adminToken),
        say,
        eventCounts: () => rt.runPromise(orders.eventCounts, { signal })
      }),
    catch: (error) => {
      console.error("[orders] failed:", error instanceof Demo.DemoError ? error.message : error)
      return new Exit(1)
    }
  })
})

// SIGINT / SIGTERM interrupt it: the server, the runtime and the embedded database close in reverse
// order, then "stopped" and exit 0.
Main.runMain(Effect.scoped(main).pipe(Effect.onInterrupt(() => Effect.sync(() => say("stopped")))))
