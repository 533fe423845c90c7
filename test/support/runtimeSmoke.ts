/**
 * A runtime smoke, run as a script by any runtime (`bun test/support/runtimeSmoke.ts`): the pieces
 * an app puts together, on the test PostgreSQL (`TIDINGS_TEST_PG_URL`):
 *
 * - a Hono app on a Tidings runtime, served by `Serve.serve` (the runtime's own server), writing
 *   orders and their events in one transaction (`Command.handler`), bad input answered 400;
 * - the relay (eager dispatch and polling) publishing them to the in-memory broker;
 * - a consumer handling each once through the PostgreSQL inbox;
 * - the webhooks publisher delivering to a `WebhookReceiver` served the same way, duplicates producing
 *   one effect;
 * - `close()` letting an in-flight request finish; a port in use refused with a `ServeError`.
 *
 * Prints `smoke ok on <runtime> (<server>)` and exits 0, or prints the failure and exits 1.
 */
import { Inbox, MemoryBroker, type Message, Outbox, Relay } from "@tidings/core"
import { Event } from "@tidings/core"
import { Command, HttpErrors, Runtime, Serve } from "@tidings/hono"
import { Migrator, PgClient, PgInboxStore, PgOutboxStore } from "@tidings/postgres"
import { WebhookPublisher, WebhookReceiver, WebhookSignature } from "@tidings/webhooks"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Hono } from "hono"

const url = process.env["TIDINGS_TEST_PG_URL"] ?? process.env["DATABASE_URL"]
if (url === undefined) throw new Error("set TIDINGS_TEST_PG_URL")
const schema = `smoke_${Serve.runtime()}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`
const step = (line: string) => console.log(`smoke: ${line}`)

const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, totalCents: Schema.Int })
})
const OrderBody = Schema.Struct({
  orderId: Schema.String.check(Schema.isMinLength(1)),
  totalCents: Schema.Int.check(Schema.isGreaterThan(0))
})

const table = (name: string) =>
  SqlClient.SqlClient.use((sql) => sql`CREATE TABLE ${sql(`${schema}.${name}`)} (id text NOT NULL)`)
const count = (name: string) =>
  SqlClient.SqlClient.use((sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.${name}`)}`).pipe(
    Effect.map((rows) => rows[0]!.n)
  )
const insert = (name: string, id: string) =>
  SqlClient.SqlClient.use((sql) => sql`INSERT INTO ${sql(`${schema}.${name}`)} (id) VALUES (${id})`)

const waitFor = async (what: string, check: () => Promise<boolean>) => {
  const deadline = Date.now() + 30_000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

const assert = (condition: boolean, message: string) => {
  if (!condition) throw new Error(message)
}

const main = async () => {
  const Database = PgClient.layer({ url, maxConnections: 6 })
  const Tables = Layer.effectDiscard(Effect.gen(function*() {
    yield* Migrator.run({ schema })
    yield* table("orders")
    yield* table("consumed")
    yield* table("webhooks")
  }))
  const Consumer = MemoryBroker.consumerLayer({
    queue: "smoke",
    types: ["order.*"],
    handler: Inbox.wrap("smoke-consumer", (d: MemoryBroker.ConsumerDelivery) => insert("consumed", d.event.id))
  })
  const Stores = Layer.mergeAll(PgOutboxStore.layer({ schema }), PgInboxStore.layer({ schema }), MemoryBroker.layer())
  const layer = Layer.mergeAll(Relay.layer({ concurrency: 2, statsInterval: false, retention: false }), Consumer).pipe(
    Layer.provideMerge(Stores),
    Layer.provideMerge(Tables),
    Layer.provideMerge(Database)
  )
  const rt = await Runtime.make(layer)
  const servers: Array<Serve.Server> = []
  try {
    const secret = WebhookSignature.generateSecret()
    const app = new Hono()
    app.onError(HttpErrors.onError)
    app.post(
      "/orders",
      Command.handler(rt, { body: OrderBody, status: 201 }, ({ body }) =>
        Effect.gen(function*() {
          yield* insert("orders", body.orderId)
          const event = yield* Outbox.append(OrderPlaced, { aggregateId: body.orderId, payload: body })
          return { eventId: event.id }
        }))
    )
    let slowStarted = false
    app.get("/slow", () => {
      slowStarted = true
      return new Promise<Response>((resolve) => setTimeout(() => resolve(new Response("slow done")), 300))
    })
    app.post(
      "/webhooks",
      WebhookReceiver.hono(rt, { secret, consumer: "smoke-webhooks" }, (w) => insert("webhooks", w.id))
    )
    const server = await Serve.serve(app)
    servers.push(server)
    step(`serving on ${server.url} with ${Serve.runtime()}'s server`)

    for (const orderId of ["o-1", "o-2", "o-3"]) {
      const response = await fetch(`${server.url}/orders`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ orderId, totalCents: 100 })
      })
      const text = await response.text()
      assert(response.status === 201, `POST /orders answered ${response.status}: ${text}`)
    }
    const bad = await fetch(`${server.url}/orders`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ orderId: "" })
    })
    assert(bad.status === 400 && (await bad.text()).includes("BadRequest"), `bad input answered ${bad.status}`)
    assert(await rt.runPromise(count("orders")) === 3, "3 order rows")
    step("Hono app: 3 orders written with their events, bad input 400")

    await waitFor("the relay and the consumer", async () => await rt.runPromise(count("consumed")) === 3)
    const broker = await rt.runPromise(MemoryBroker.MemoryBroker.use((b) => b.delivered))
    assert(broker.filter((d) => d.message.type === "order.placed").length === 3, "3 events published")
    step("relay: 3 events published; consumer: 3 handled once through the inbox")

    const publisher = await rt.runPromise(
      WebhookPublisher.make({ endpoints: [{ url: `${server.url}/webhooks`, secret }] })
    )
    const message = broker[0]!.message as Message.Message
    for (let i = 0; i < 3; i++) {
      const [result] = await rt.runPromise(publisher.publish([message]))
      assert(result!._tag === "Published", `webhook delivery ${i}: ${JSON.stringify(result)}`)
    }
    assert(await rt.runPromise(count("webhooks")) === 1, "one webhook effect for three deliveries")
    step("webhooks: 3 signed deliveries of one event, 1 effect")

    const inFlight = fetch(`${server.url}/slow`)
    await waitFor("the slow request to reach its handler", async () => slowStarted)
    const closing = server.close()
    const slow = await inFlight
    assert(slow.status === 200 && await slow.text() === "slow done", "the in-flight request finished during close()")
    await closing
    const refused = await fetch(`${server.url}/slow`).then(() => false, () => true)
    assert(refused, "closed server refuses connections")
    const first = await Serve.serve(() => new Response("first"))
    servers.push(first)
    const taken = await Serve.serve(() => new Response("second"), { port: first.port }).then(
      () => false,
      (e) => e instanceof Serve.ServeError
    )
    assert(taken, "a port in use is a ServeError")
    step("Serve: close() lets an in-flight request finish; a port in use is a ServeError")
  } finally {
    for (const s of servers) await s.close()
    await rt.runPromise(SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`)).catch(() =>
      undefined
    )
    await rt.dispose()
  }
  console.log(`smoke ok on ${Serve.runtime()}`)
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error("smoke failed:", error)
    process.exit(1)
  }
)
