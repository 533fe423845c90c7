/**
 * Recipe: a producer service with the relay in process (docs/recipes/producer.md).
 * `npm run example -- producer`: starts PostgreSQL (embedded unless TIDINGS_PG_URL is set), places
 * orders (each order row and its event in one transaction), and the relay in the same process
 * publishes them right after each commit to RabbitMQ (TIDINGS_AMQP_URL) or the in-memory broker.
 * Prints each order's commit → publish time and the outbox's counts; exits 0.
 */
import { Event, Main, MemoryBroker, Outbox, OutboxStore, Relay } from "@tidings/core"
import { Migrator, PgClient, PgOutboxStore } from "@tidings/postgres"
import { AmqpConnection, AmqpPublisher, Topology } from "@tidings/rabbitmq"
import { Effect, Layer, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { scopedPostgres } from "../../test/support/embeddedPostgres.ts"

const say = (line: string) => Effect.sync(() => console.log(`[producer] ${line}`))

// The service's event and its one write path: the order row and the event commit together.
const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, customer: Schema.String, totalCents: Schema.Int })
})

const placeOrder = (orderId: string, customer: string, totalCents: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`INSERT INTO producer.orders (id, customer, total_cents) VALUES (${orderId}, ${customer}, ${totalCents})`
      return yield* Outbox.append(OrderPlaced, { aggregateId: orderId, payload: { orderId, customer, totalCents } })
    }))
  })

/**
 * The publisher the relay uses: RabbitMQ (a topic exchange; consumers bind their queues to it), or
 * the in-memory broker when no broker is configured.
 */
/**
 * RabbitMQ's names for this recipe: the exchange the relay publishes to, and one queue bound to it.
 * The publisher uses `mandatory`: an event no queue is bound for is retried by the relay, never lost,
 * so something must be bound before events flow (your consumers' queues; here an audit queue whose
 * messages expire after a minute).
 */
const topology = Topology.make({
  exchanges: [{ name: "tidings.recipes.producer" }],
  queues: [{ name: "tidings.recipes.producer.audit", type: "classic", messageTtl: "1 minute" }],
  bindings: [{ exchange: "tidings.recipes.producer", queue: "tidings.recipes.producer.audit", routingKey: "#" }]
})

const publisher = (amqpUrl: string | undefined) =>
  amqpUrl === undefined || amqpUrl === ""
    ? MemoryBroker.layer()
    : AmqpPublisher.layer({ exchange: "tidings.recipes.producer" }).pipe(
      Layer.provide(AmqpConnection.layer({ url: amqpUrl, name: "producer", topology }))
    )

/**
 * The service's layers: the relay lives as long as the service, on the same store and database
 * client as the business code. Events appended here are handed to it after the commit (no polling).
 */
const layer = (pgUrl: string, amqpUrl: string | undefined) =>
  Relay.layer({ concurrency: 2 }).pipe(
    Layer.provideMerge(PgOutboxStore.layer({ schema: "producer" })),
    Layer.provideMerge(publisher(amqpUrl)),
    Layer.provideMerge(PgClient.layer({ url: pgUrl }))
  )

const demo = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const store = yield* OutboxStore.OutboxStore
  const before = (yield* store.stats).published
  const runId = Date.now().toString(36)
  for (const [i, customer] of ["ada", "grace", "linus"].entries()) {
    const event = yield* placeOrder(`${runId}-${i + 1}`, customer, 1000 + i)
    yield* say(`order ${runId}-${i + 1} by ${customer}: committed with event ${event.id.slice(-12)}`)
  }
  const stats = yield* store.stats.pipe(
    Effect.repeat({
      schedule: Schedule.spaced("20 millis"),
      until: (s) => s.published - before >= 3 && s.pending === 0 && s.processing === 0
    })
  )
  const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM producer.orders WHERE id LIKE ${`${runId}-%`}`
  yield* say(
    `published ${stats.published - before} events for ${
      rows[0]?.n
    } orders; outbox: ${stats.pending} pending, ${stats.failed} failed`
  )
})

const main = Effect.gen(function*() {
  const pg = yield* scopedPostgres()
  const amqpUrl = process.env["TIDINGS_AMQP_URL"]
  yield* say(
    `PostgreSQL ${pg.external ? "from TIDINGS_PG_URL" : "embedded"}; broker: ${
      amqpUrl ? "RabbitMQ" : "in memory (set TIDINGS_AMQP_URL for RabbitMQ)"
    }`
  )
  // Migrations and the service's own table, before the relay starts.
  yield* Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* Migrator.run({ schema: "producer" })
    yield* sql`CREATE TABLE IF NOT EXISTS producer.orders (id text PRIMARY KEY, customer text NOT NULL, total_cents int NOT NULL)`
  }).pipe(Effect.provide(PgClient.layer({ url: pg.url })))
  yield* Effect.scoped(demo).pipe(Effect.provide(layer(pg.url, amqpUrl)))
})

Main.runMain(Effect.scoped(main))
