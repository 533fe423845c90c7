/**
 * The edge example (`examples/edge`) on the real Cloudflare Workers runtime: the Worker is bundled
 * with esbuild and run by `workerd` (npm), talking to the test PostgreSQL over `cloudflare:sockets`
 * (postgres.js' Workers build) and delivering webhooks to a local receiver that checks every
 * signature with the reference implementation. HTTP requests write orders with their events; cron
 * runs (bounded relay passes) publish them.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { WebhookSignature } from "@tidings/webhooks"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { build } from "../examples/edge/build.ts"
import * as Local from "../examples/edge/local.ts"
import { migrate } from "../examples/edge/migrate.ts"
import { type Answer, type Receiver, startReceiver, until } from "../packages/webhooks/test/receiver.ts"
import { pgClientLayer, pgUrl, schemaName } from "./support/pg.ts"
import { currentRuntime, defaultStallMs, exited, spawnOn, watchProgress } from "./support/processes.ts"

const secret = WebhookSignature.generateSecret()
const schema = schemaName("edge")
const work = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-edge-test-"))
// The receiver refuses the first delivery of this order once (503): a retry for a later pass.
const flaky = `flaky-${Date.now().toString(36)}`
let refused = 0

let worker: Local.LocalWorker
let receiver: Receiver

const query = <A extends object>(text: string) =>
  Effect.runPromise(
    SqlClient.SqlClient.use((sql) => sql.unsafe<A>(text)).pipe(Effect.provide(pgClientLayer(pgUrl(), 1)))
  )

const post = async (body: unknown) => {
  const response = await fetch(`${worker.url}/orders`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body)
  })
  return { status: response.status, json: await response.json() as any }
}

/** The relay pass reports the Worker printed, in order. */
const reports = () =>
  [...worker.output().matchAll(/tidings relay pass \([^)]*\): (\{.*\})/g)].map((m) =>
    JSON.parse(m[1]!) as Record<string, unknown>
  )

let passes = 0
/** Fires the cron trigger once; resolves when the Worker's report of that pass has been printed. */
const pass = async () => {
  await worker.scheduled()
  passes++
  await until("the pass's report", () => reports().length >= passes)
}

beforeAll(async () => {
  await migrate(pgUrl(), schema)
  const bundle = await build(path.join(work, "worker.js"))
  receiver = await startReceiver(secret, (r): Answer => {
    if (r.json?.aggregateId === flaky && refused === 0) {
      refused++
      return { status: 503, body: "warming up" }
    }
    return { status: 204 }
  })
  worker = await Local.start({
    bundle,
    bindings: {
      DATABASE_URL: pgUrl(),
      TIDINGS_SCHEMA: schema,
      WEBHOOK_URL: receiver.url,
      WEBHOOK_SECRET: secret,
      RELAY_MAX_EVENTS: "3"
    }
  })
})

afterAll(async () => {
  await worker?.stop()
  await receiver?.close()
  await query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
  fs.rmSync(work, { recursive: true, force: true })
})

describe("examples/edge on workerd (Cloudflare Workers runtime)", () => {
  it("HTTP writes each order and its event in one transaction; nothing is published before a cron run", async () => {
    const placed = await Promise.all([
      post({ customer: "ada", totalCents: 1299, orderId: "o-1" }),
      post({ customer: "grace", totalCents: 990, orderId: "o-2" }),
      post({ customer: "linus", totalCents: 5000, orderId: flaky }),
      post({ customer: "ken", totalCents: 120 })
    ])
    assert.deepStrictEqual(placed.map((p) => [p.status, p.json.created]), [[201, true], [201, true], [201, true], [
      201,
      true
    ]])
    // The same order id again: no second row, no second event.
    const again = await post({ customer: "ada", totalCents: 1299, orderId: "o-1" })
    assert.deepStrictEqual([again.status, again.json.created], [200, false])
    // Bad input is a typed 400; an unknown order a 404; neither writes anything.
    const bad = await post({ customer: "", totalCents: -1 })
    assert.strictEqual(bad.status, 400)
    assert.strictEqual(bad.json.error.tag, "BadRequest")
    assert.strictEqual((await fetch(`${worker.url}/orders/nope`)).status, 404)

    const orders = await query<{ id: string }>(`SELECT id FROM ${schema}.edge_orders`)
    const events = await query<{ id: string; aggregate_id: string; status: string }>(
      `SELECT id::text, aggregate_id, status FROM ${schema}.outbox WHERE event_type = 'order.placed'`
    )
    assert.strictEqual(orders.length, 4)
    assert.sameMembers(events.map((e) => e.aggregate_id), orders.map((o) => o.id))
    assert.sameMembers(placed.map((p) => p.json.eventId), events.map((e) => e.id))
    assert.isTrue(events.every((e) => e.status === "pending"))
    const shown = await (await fetch(`${worker.url}/orders/o-1`)).json() as {
      event_status: string
      total_cents: number
    }
    assert.deepInclude(shown, { event_status: "pending", total_cents: 1299 })
    assert.strictEqual(receiver.received.length, 0)
  })

  it("cron runs are bounded relay passes: at most RELAY_MAX_EVENTS each, retries left for a later pass, every event delivered signed", async () => {
    await pass()
    // Four events due, three at most per pass: the first pass stops at its bound.
    assert.deepInclude(reports()[0], { claimed: 3, reason: "max-events" })
    // Later passes take the fourth, and the refused event once its backoff (1 s or so) has passed.
    await until("every event published by later passes", async () => {
      await pass()
      const rows = await query<{ status: string }>(`SELECT status FROM ${schema}.outbox`)
      if (rows.every((r) => r.status === "published")) return true
      await new Promise((r) => setTimeout(r, 250))
      return false
    })
    const all = reports() as Array<
      { published: number; retried: number; failed: number; claimed: number; reason: string }
    >
    assert.isTrue(all.every((r) => r.claimed <= 3), JSON.stringify(all))
    assert.strictEqual(all.reduce((n, r) => n + r.published, 0), 4, JSON.stringify(all))
    assert.strictEqual(all.reduce((n, r) => n + r.retried, 0), 1, JSON.stringify(all))
    assert.strictEqual(all.reduce((n, r) => n + r.failed, 0), 0, JSON.stringify(all))
    const events = await query<{ id: string; aggregate_id: string; status: string; attempts: number }>(
      `SELECT id::text, aggregate_id, status, attempts FROM ${schema}.outbox`
    )
    assert.isTrue(events.every((e) => e.status === "published"), JSON.stringify(events))
    assert.strictEqual(events.find((e) => e.aggregate_id === flaky)!.attempts, 2)
    assert.isTrue(receiver.received.every((r) => r.verified), "standardwebhooks accepts every signature")
    const delivered = receiver.received.filter((r) => r.headers["webhook-id"] !== undefined)
    assert.sameMembers([...new Set(delivered.map((r) => r.id))], events.map((e) => e.id))
    const ada = delivered.find((r) => r.json.aggregateId === "o-1")!
    assert.deepStrictEqual(ada.json.data, { orderId: "o-1", customer: "ada", totalCents: 1299 })
    assert.strictEqual(ada.json.type, "order.placed")
    const shown = await (await fetch(`${worker.url}/orders/o-1`)).json() as { event_status: string }
    assert.strictEqual(shown.event_status, "published")
    // Nothing left: a pass finds nothing due.
    await pass()
    assert.deepInclude(reports().at(-1), { claimed: 0, published: 0, reason: "idle" })
  })
})

describe(`the edge walkthrough (npm run edge) on ${currentRuntime()}`, () => {
  it("runs the Worker in workerd on an embedded PostgreSQL, relays to a verifying receiver, and exits 0", async () => {
    const child = spawnOn(currentRuntime(), path.join(import.meta.dirname, "../examples/edge/demo.ts"), [], {
      TIDINGS_PG_URL: ""
    })
    // Killed only when it stops making progress (no output, no CPU): a slow machine is waited for.
    const stopWatching = watchProgress(child, defaultStallMs, () => child.kill("SIGKILL"))
    const code = await exited(child).finally(stopWatching)
    // Its pipes close when the last process holding them ends (the demo's own PostgreSQL and
    // workerd may outlive it by a moment): give them that moment, then close our ends.
    if (child.stdout?.readableEnded !== true || child.stderr?.readableEnded !== true) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 5_000)
        child.once("close", () => {
          clearTimeout(timer)
          resolve()
        })
      })
    }
    child.stdout?.destroy()
    child.stderr?.destroy()
    assert.strictEqual(code, 0, child.output())
    const output = child.output()
    assert.include(output, "events before any cron run: pending, pending, pending")
    assert.include(
      output,
      `cron run 1 (a bounded relay pass, at most 2 events): {"published":2,"retried":0,"failed":0,"claimed":2,"reason":"max-events"}`
    )
    assert.include(output, "events after the cron runs: published, published, published")
    assert.match(output, /the receiver recorded 3 orders/)
  })
})
