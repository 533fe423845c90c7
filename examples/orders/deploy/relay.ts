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
 * Environment: `TIDINGS_PG_URL` (required), `TIDINGS_SCHEMA` (default `orders`), `WEBHOOK_URL` and
 * `WEBHOOK_SECRET` (`whsec_…`, required), `WEBHOOK_TYPES` (comma-separated patterns, default `#`).
 * SIGTERM or SIGINT shuts it down gracefully (in-flight batches finish, claims are released).
 */
import { Metrics, Relay } from "@tidings/core"
import { PgClient, PgOutboxStore, PgWakeup } from "@tidings/postgres"
import { WebhookPublisher } from "@tidings/webhooks"
import { Effect, Exit, Fiber, Layer, Metric, Redacted } from "effect"
import process from "node:process"

const say = (line: string) => console.log(`[relay] ${line}`)

const required = (name: string): string => {
  const value = process.env[name]
  if (value === undefined || value === "") {
    console.error(`[relay] set ${name}`)
    process.exit(2)
  }
  return value
}

const schema = process.env["TIDINGS_SCHEMA"] || "orders"
const url = required("WEBHOOK_URL")
const types = (process.env["WEBHOOK_TYPES"] || "#").split(",").map((t) => t.trim()).filter((t) => t !== "")
const Database = PgClient.layer({ url: Redacted.make(required("TIDINGS_PG_URL")), maxConnections: 4, applicationName: "tidings-relay" })
const Publishing = WebhookPublisher.layer({ endpoints: [{ url, secret: Redacted.make(required("WEBHOOK_SECRET")), types }] })
const Worker = Relay.layer({ name: "relay-worker", concurrency: 2, pollInterval: { base: "50 millis", max: "1 second" } }).pipe(
  // LISTEN for the commits of producers whose store sends NOTIFY; the others are found by polling.
  Layer.provideMerge(Layer.mergeAll(PgOutboxStore.layer({ schema }), Publishing, PgWakeup.layer())),
  Layer.provide(Database)
)

const fiber = Effect.runFork(
  Effect.gen(function*() {
    const relay = yield* Layer.build(Worker)
    void relay
    say(`running: ${schema}.outbox → ${new URL(url).host} (${types.join(", ")}); Ctrl-C stops`)
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
