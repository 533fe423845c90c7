/**
 * The edge walkthrough (`npm run edge`, or `node examples/edge/demo.ts`): the Worker of this folder
 * on the real Cloudflare Workers runtime (`workerd` from npm, on 127.0.0.1, no account), an embedded
 * PostgreSQL (or TIDINGS_PG_URL), and a webhook receiver on this machine that verifies every request
 * and records each order once through its inbox. It places orders over HTTP, fires the cron trigger
 * (bounded relay passes), shows what the receiver got, and exits 0.
 */
import { Runtime, Serve } from "@tidings/hono"
import { Migrator, PgClient, PgInboxStore, PgOutboxStore } from "@tidings/postgres"
import { WebhookReceiver, WebhookSignature } from "@tidings/webhooks"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { Hono } from "hono"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { build } from "./build.ts"
import * as Local from "./local.ts"
import { migrate } from "./migrate.ts"

const say = (line: string) => console.log(`[edge] ${line}`)

/** The receiving side: another service, here on the same database in a schema of its own. */
const startReceiver = async (url: string, secret: string) => {
  const schema = "edge_receiver"
  const layer = Layer.mergeAll(
    PgInboxStore.layer({ schema }),
    PgOutboxStore.layer({ schema }),
    Layer.effectDiscard(Migrator.run({ schema }))
  ).pipe(
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 4 }))
  )
  const rt = await Runtime.make(layer)
  await rt.runPromise(
    SqlClient.SqlClient.use((sql) =>
      sql`CREATE TABLE IF NOT EXISTS ${
        sql(`${schema}.received_orders`)
      } (order_id text NOT NULL, webhook_id text NOT NULL, received_at timestamptz NOT NULL DEFAULT now())`
    )
  )
  const app = new Hono()
  app.post(
    "/webhooks/orders",
    WebhookReceiver.hono(rt, { secret, consumer: "order-webhooks" }, (webhook) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const order = webhook.data as { readonly orderId: string }
        // In the inbox's transaction: recorded once per webhook-id, however often it is delivered.
        yield* sql`INSERT INTO ${
          sql(`${schema}.received_orders`)
        } (order_id, webhook_id) VALUES (${order.orderId}, ${webhook.id})`
      }))
  )
  const server = await Serve.serve(app)
  const received = () =>
    rt.runPromise(
      SqlClient.SqlClient.use((sql) =>
        sql<{ order_id: string }>`SELECT order_id FROM ${sql(`${schema}.received_orders`)} ORDER BY received_at`
      )
    )
  return {
    url: `${server.url}/webhooks/orders`,
    received,
    stop: async () => (await server.close(), await rt.dispose())
  }
}

const main = async () => {
  const cleanups: Array<() => Promise<void>> = []
  try {
    const { startPostgres } = await import("../../test/support/embeddedPostgres.ts")
    say("starting PostgreSQL (embedded; set TIDINGS_PG_URL to use a server of yours) ...")
    const pg = await startPostgres()
    cleanups.push(pg.stop)
    const schema = "edge"
    await migrate(pg.url, schema)
    say(`PostgreSQL ready; schema "${schema}" migrated (a deploy step: node examples/edge/migrate.ts)`)

    const secret = WebhookSignature.generateSecret()
    const receiver = await startReceiver(pg.url, secret)
    cleanups.push(receiver.stop)
    say(`webhook receiver on ${receiver.url} (verifies signatures, handles each webhook-id once)`)

    const work = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-edge-"))
    cleanups.push(async () => fs.rmSync(work, { recursive: true, force: true }))
    const bundle = await build(path.join(work, "worker.js"))
    say(`Worker bundled: ${(fs.statSync(bundle).size / 1024).toFixed(0)} KiB (esbuild, postgres.js' Workers build)`)
    const worker = await Local.start({
      bundle,
      bindings: {
        DATABASE_URL: pg.url,
        TIDINGS_SCHEMA: schema,
        WEBHOOK_URL: receiver.url,
        WEBHOOK_SECRET: secret,
        RELAY_MAX_EVENTS: "2"
      }
    })
    cleanups.push(worker.stop)
    say(`workerd serving the Worker on ${worker.url}`)

    const orders = [{ customer: "ada", totalCents: 2599 }, { customer: "grace", totalCents: 990 }, {
      customer: "linus",
      totalCents: 1250
    }]
    const ids: Array<string> = []
    for (const order of orders) {
      const response = await fetch(`${worker.url}/orders`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(order)
      })
      const placed = await response.json() as { orderId: string; eventId: string }
      ids.push(placed.orderId)
      say(
        `POST /orders ${JSON.stringify(order)} → ${response.status}: order …${placed.orderId.slice(-8)}, event …${
          placed.eventId.slice(-8)
        } (one transaction)`
      )
    }
    const status = async (id: string) =>
      ((await (await fetch(`${worker.url}/orders/${id}`)).json()) as { event_status: string }).event_status
    say(`events before any cron run: ${(await Promise.all(ids.map(status))).join(", ")}`)

    const passes = () => [...worker.output().matchAll(/tidings relay pass \([^)]*\): (.*)/g)].map((m) => m[1]!)
    for (let i = 1; i <= 3; i++) {
      await worker.scheduled()
      // workerd prints the Worker's console output on its own schedule: wait for this run's line.
      while (passes().length < i) await new Promise((r) => setTimeout(r, 10))
      say(`cron run ${i} (a bounded relay pass, at most 2 events): ${passes()[i - 1]}`)
    }
    say(`events after the cron runs: ${(await Promise.all(ids.map(status))).join(", ")}`)
    const received = (await receiver.received()).filter((r) => ids.includes(r.order_id))
    say(
      `the receiver recorded ${received.length} orders: ${received.map((r) => "…" + r.order_id.slice(-8)).join(", ")}`
    )
    if (received.length !== orders.length) {
      throw new Error(`expected ${orders.length} orders at the receiver, got ${received.length}`)
    }
    say("done")
  } finally {
    for (const f of cleanups.reverse()) await f().catch((e) => console.error("[edge] cleanup failed:", e))
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error("[edge] failed:", error)
    process.exit(1)
  }
)
