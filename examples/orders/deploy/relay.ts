/**
 * A relay worker for the orders service: a process of its own that relays the service's outbox and
 * delivers every event as a signed webhook (Standard Webhooks) to `WEBHOOK_URL`. Run it beside the
 * service, as many as you like (they share the table through claims and leases):
 *
 *   deno run -A --no-config --import-map examples/orders/deploy/deno.json examples/orders/deploy/relay.ts
 *
 * or as one binary: `bun build --compile examples/orders/deploy/relay.ts --outfile tidings-relay`
 * (`deno compile` with the same flags as `deno run` makes one too, where it can download Deno's
 * `denort` runtime).
 *
 * Environment: the components' own variables (the root README's configuration table):
 * `TIDINGS_PG_URL` (required) and `TIDINGS_PG_*`, `TIDINGS_SCHEMA` (default `orders`),
 * `TIDINGS_RELAY_*` (default here: 2 pollers), and the webhook endpoint's `WEBHOOK_URL` and
 * `WEBHOOK_SECRET` (`whsec_…`, required), `WEBHOOK_TYPES` (comma-separated patterns, default `#`).
 * A wrong setting stops it at once (exit 2) with one message naming every wrong variable.
 * SIGTERM or SIGINT shuts it down gracefully (in-flight batches finish, claims are released).
 */
import { Metrics, Relay, Settings } from "@tidings/core"
import { PgClient, PgOutboxStore, PgWakeup } from "@tidings/postgres"
import { WebhookPublisher } from "@tidings/webhooks"
import { Config, Effect, Exit, Fiber, Layer, Metric } from "effect"
import process from "node:process"

const say = (line: string) => console.log(`[relay] ${line}`)

const settings = Settings.all({
  pg: Settings.read(PgClient.environment, { defaults: { maxConnections: 4, applicationName: "tidings-relay" } }),
  outbox: Settings.read(PgOutboxStore.environment, { defaults: { schema: "orders" } }),
  relay: Relay.config({
    defaults: { name: "relay-worker", concurrency: 2, pollInterval: { base: "50 millis", max: "1 second" } }
  })
})

const Worker = (s: Effect.Success<typeof settings>) =>
  Relay.layer(s.relay).pipe(
    // LISTEN for the commits of producers whose store sends NOTIFY; the others are found by polling.
    Layer.provideMerge(
      Layer.mergeAll(
        PgOutboxStore.layer(s.outbox),
        WebhookPublisher.layerConfig("WEBHOOK"),
        PgWakeup.layer({ schema: s.outbox.schema })
      )
    ),
    Layer.provide(PgClient.layer(s.pg))
  )

const fiber = Effect.runFork(
  Effect.gen(function*() {
    const s = yield* settings.pipe(Effect.catch((error) =>
      Effect.sync(() => {
        console.error(`[relay] invalid settings: ${error.message}`)
        return process.exit(2)
      })
    ))
    yield* Layer.build(Worker(s))
    const url = yield* Config.String("WEBHOOK_URL")
    const types = yield* Config.String("WEBHOOK_TYPES").pipe(Config.withDefault("#"))
    say(`running: ${s.outbox.schema}.outbox → ${new URL(url).host} (${types}); Ctrl-C stops`)
    return yield* Effect.never
  }).pipe(Effect.scoped)
)

let stopping = false
const stop = async () => {
  if (stopping) return
  stopping = true
  const exit = await Effect.runPromise(Fiber.interrupt(fiber).pipe(Effect.andThen(Fiber.await(fiber))))
  const published = await Effect.runPromise(Metric.value(Metrics.published))
  say(`stopped (${published.count} events published)`)
  process.exit(Exit.isFailure(exit) && !Exit.hasInterrupts(exit) ? 1 : 0)
}
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
fiber.addObserver((exit) => {
  if (!stopping) {
    console.error("[relay] failed:", Exit.isFailure(exit) ? exit.cause : exit)
    process.exit(1)
  }
})
