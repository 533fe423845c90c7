/**
 * Recipe: a consumer with an inbox on RabbitMQ (docs/recipes/rabbitmq-consumer.md).
 * `TIDINGS_AMQP_URL=amqp://... npm run example -- rabbitmq-consumer`: starts PostgreSQL (embedded
 * unless TIDINGS_PG_URL is set), runs the billing consumer (consumer.ts) and, as the producer, an
 * outbox with a relay publishing to RabbitMQ; places three orders, delivers one of them a second
 * time (as after a relay crash between publish and settle), and shows that each order was charged
 * once. Exits 0.
 */
import { Inbox, Main, Outbox, Publisher, Relay } from "@tidings/core"
import { Migrator, PgClient, PgOutboxStore } from "@tidings/postgres"
import { AmqpConnection, AmqpPublisher, Topology } from "@tidings/rabbitmq"
import { Effect, Layer, Metric, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import { scopedPostgres } from "../../test/support/embeddedPostgres.ts"
import * as Billing from "./consumer.ts"

const say = (line: string) => Effect.sync(() => console.log(`[billing] ${line}`))
const schema = "billing"
/** RabbitMQ names: `tidings.recipes.events` (the exchange), `tidings.recipes.billing` (the queue), ... */
const prefix = "tidings.recipes"
const runId = Date.now().toString(36)

const demo = (pgUrl: string, amqpUrl: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* Migrator.run({ schema }) // the outbox and inbox tables
    yield* sql`CREATE TABLE IF NOT EXISTS billing.charges (order_id text NOT NULL, cents int NOT NULL)`

    // The consumer runs as long as this scope.
    yield* Layer.build(Billing.layer({ pgUrl, amqpUrl, schema, prefix }))
    yield* say("consumer running: queue " + Billing.billingQueue(prefix).queue)

    // The producer: events appended in business transactions, relayed to RabbitMQ.
    const orders = ["o-1", "o-2", "o-3"].map((id) => `${runId}-${id}`)
    const messages = []
    for (const [i, orderId] of orders.entries()) {
      messages.push(
        yield* sql.withTransaction(
          Outbox.append(Billing.OrderPlaced, { aggregateId: orderId, payload: { orderId, totalCents: 1000 + i } })
        )
      )
    }
    // The same message once more: the broker delivers it again, the inbox recognises it.
    const publisher = yield* Publisher.Publisher
    yield* publisher.publish([messages[0]!])

    const duplicates = Metric.value(Metric.withAttributes(Inbox.handled, { consumer: "billing", outcome: "duplicate" }))
    const charges = sql<
      { order_id: string; n: number }
    >`SELECT order_id, count(*)::int AS n FROM billing.charges WHERE order_id LIKE ${`${runId}-%`} GROUP BY order_id ORDER BY order_id`
    yield* Effect.all([charges, duplicates]).pipe(
      Effect.repeat({
        schedule: Schedule.spaced("50 millis"),
        until: ([rows, dup]) => rows.length === orders.length && dup.count >= 1
      })
    )
    for (const row of yield* charges) yield* say(`${row.order_id} charged ${row.n} time${row.n === 1 ? "" : "s"}`)
    yield* say(`${(yield* duplicates).count} duplicate delivery acked without charging again`)
  })

const main = Effect.gen(function*() {
  const amqpUrl = process.env["TIDINGS_AMQP_URL"] ?? ""
  if (amqpUrl === "") {
    console.error(
      "[billing] this recipe needs RabbitMQ: TIDINGS_AMQP_URL=amqp://user:password@host:5672/ npm run example -- rabbitmq-consumer"
    )
    return yield* Effect.die(
      Object.assign(new Error("TIDINGS_AMQP_URL is not set"), { ["~effect/Runtime/errorReported"]: false })
    )
  }
  const pg = yield* scopedPostgres()
  const Producer = Relay.layer().pipe(
    Layer.provideMerge(PgOutboxStore.layer({ schema })),
    Layer.provideMerge(
      AmqpPublisher.layer({ exchange: `${prefix}.events` }).pipe(
        Layer.provide(
          AmqpConnection.layer({
            url: amqpUrl,
            name: "orders-producer",
            topology: Topology.make({ exchanges: [{ name: `${prefix}.events` }] })
          })
        )
      )
    ),
    Layer.provideMerge(PgClient.layer({ url: pg.url }))
  )
  yield* Effect.scoped(demo(pg.url, amqpUrl)).pipe(Effect.provide(Producer))
})

Main.runMain(Effect.scoped(main))
