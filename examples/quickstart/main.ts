/**
 * The quick-start walkthrough (`node examples/quickstart/main.ts`): starts an embedded PostgreSQL (or uses TIDINGS_PG_URL), writes orders
 * and their events in business transactions, relays them to the in-memory broker, and prints what
 * happened: deliveries with their commit → publish latency, a rolled-back order that published
 * nothing, a publish the broker refused once and the relay retried.
 */
import { Errors, Event, Main, MemoryBroker, Outbox, OutboxStore, Relay } from "@tidings/core"
import { Migrator, PgClient, PgOutboxStore } from "@tidings/postgres"
import { Duration, Effect, Layer, Schedule, Schema, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { scopedPostgres } from "../../test/support/embeddedPostgres.ts"

const say = (line: string) => Effect.sync(() => console.log(`[demo] ${line}`))

const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({
    orderId: Schema.String,
    customer: Schema.String,
    totalCents: Schema.Int.check(Schema.isGreaterThan(0))
  })
})
const PaymentRequested = Event.define("payment.requested", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, amountCents: Schema.Int })
})

class OutOfStock extends Schema.TaggedError<OutOfStock>()("OutOfStock", { sku: Schema.String }) {}

/** One business transaction: the order row and its two events commit together or not at all. */
const placeOrder = (orderId: string, customer: string, sku: string, totalCents: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`INSERT INTO demo_orders (id, customer, sku, total_cents) VALUES (${orderId}, ${customer}, ${sku}, ${totalCents})`
      const written = yield* Outbox.appendAll([
        OrderPlaced.make({ aggregateId: orderId, payload: { orderId, customer, totalCents } }),
        PaymentRequested.make({ aggregateId: orderId, payload: { orderId, amountCents: totalCents } })
      ])
      if (sku === "sold-out") return yield* new OutOfStock({ sku }) // rolls back the row and the events
      return written
    }))
  })

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const applied = yield* Migrator.run({ schema: "tidings" })
  yield* say(
    `migrations: ${applied.length === 0 ? "up to date" : applied.map((m) => `${m.version}_${m.name}`).join(", ")}`
  )
  yield* sql`CREATE TABLE IF NOT EXISTS demo_orders (id text PRIMARY KEY, customer text NOT NULL, sku text NOT NULL, total_cents int NOT NULL)`

  const broker = yield* MemoryBroker.MemoryBroker
  const committedAt = new Map<string, number>()
  // The broker refuses the first payment request once, to show a retry with backoff.
  let refusals = 1
  yield* broker.setFault((m) =>
    m.type === "payment.requested" && refusals-- > 0
      ? new Errors.PublishError({ message: "broker busy (injected)", reason: new Errors.Refused({ retryable: true }) })
      : undefined
  )
  yield* broker.subscribe.pipe(
    Stream.runForEach(({ message, receivedAt }) => {
      const latency = committedAt.has(message.id) ? `${receivedAt - committedAt.get(message.id)!} ms after commit` : ""
      return say(`  delivered ${message.type.padEnd(18)} ${message.aggregateId}  ${latency}`)
    }),
    Effect.forkScoped
  )

  yield* Layer.build(Relay.layer({ concurrency: 2, retry: Schedule.exponential("200 millis"), statsInterval: false }))
  yield* say("relay running: 2 pollers, woken after each commit, retries back off from 200 ms")

  const suffix = Date.now().toString(36)
  const orders = [
    { id: `ord-${suffix}-1`, customer: "ada", sku: "book", total: 2599 },
    { id: `ord-${suffix}-2`, customer: "grace", sku: "sold-out", total: 999 },
    { id: `ord-${suffix}-3`, customer: "linus", sku: "mug", total: 1250 }
  ]
  for (const o of orders) {
    const result = yield* Effect.result(placeOrder(o.id, o.customer, o.sku, o.total))
    if (result._tag === "Success") {
      const now = Date.now()
      for (const m of result.success) committedAt.set(m.id, now)
      yield* say(
        `${o.id} placed by ${o.customer}: order row + ${result.success.length} events committed in one transaction`
      )
    } else {
      yield* say(
        `${o.id} rejected (${result.failure._tag}): the transaction rolled back, so its events were never written`
      )
    }
  }
  const invalid = yield* Effect.flip(
    sql.withTransaction(
      Outbox.append(OrderPlaced, { aggregateId: "bad", payload: { orderId: "bad", customer: "x", totalCents: -1 } })
    )
  )
  yield* say(
    `an invalid event is refused before anything is written: ${invalid._tag}: ${invalid.message.split("\n")[0]}`
  )

  const store = yield* OutboxStore.OutboxStore
  yield* store.stats.pipe(
    Effect.repeat({ schedule: Schedule.spaced("50 millis"), until: (s) => s.pending === 0 && s.processing === 0 }),
    Effect.timeoutOrElse({
      duration: Duration.seconds(20),
      orElse: () => Effect.die(new Error("events were not relayed within 20 s"))
    })
  )
  yield* Effect.sleep("50 millis")
  const stats = yield* store.stats
  const delivered = yield* broker.delivered
  yield* say(
    `done: ${delivered.length} events delivered (2 orders × 2 events, one after a retry); outbox: ${stats.published} published, ${stats.pending} pending, ${stats.failed} failed`
  )
  const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM demo_orders WHERE id LIKE ${`ord-${suffix}-%`}`
  yield* say(`orders table: ${rows[0]?.n ?? 0} rows (the rejected order left no row and no event)`)
})

const main = Effect.gen(function*() {
  const started = Date.now()
  yield* say("starting PostgreSQL (embedded unless TIDINGS_PG_URL is set) ...")
  const pg = yield* scopedPostgres()
  yield* say(
    `PostgreSQL ready in ${Date.now() - started} ms${pg.external ? " (TIDINGS_PG_URL)" : " (embedded, 127.0.0.1)"}`
  )
  const Database = PgClient.layer({ url: pg.url })
  const AppLayer = Layer.mergeAll(PgOutboxStore.layer({ schema: "tidings" }), MemoryBroker.layer()).pipe(
    Layer.provideMerge(Database)
  )
  yield* Effect.scoped(program).pipe(Effect.provide(AppLayer))
})

Main.runMain(Effect.scoped(main))
