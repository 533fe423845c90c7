/**
 * The order list example (`node examples/orders-view/main.ts`): starts an embedded PostgreSQL (or
 * uses TIDINGS_PG_URL), writes orders with their events through the outbox, and keeps the order list
 * view up to date with a projection fed by the relay through the in-memory broker — every message
 * delivered twice, several at once — then reads its own writes, and rebuilds the view from the outbox.
 */
import { Main, MemoryBroker, Projection, Relay } from "@tidings/core"
import { Migrator, PgClient, PgInboxStore, PgOutboxStore, PgProjection } from "@tidings/postgres"
import { Effect, Layer, Schedule, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { scopedPostgres } from "../../test/support/embeddedPostgres.ts"
import {
  cancelOrder,
  createTables,
  isOrderEvent,
  listOrders,
  orderList,
  type OrderRow,
  payOrder,
  placeOrder,
  shipOrder
} from "./orders.ts"

const say = (line: string) => Effect.sync(() => console.log(`[orders-view] ${line}`))
const show = (rows: ReadonlyArray<OrderRow>) =>
  rows.map((r) =>
    `${r.order_id.slice(-2)} ${r.status}${r.carrier === null ? "" : ` via ${r.carrier}`}${
      r.note === null ? "" : ` (${r.note})`
    } ${(r.total_cents / 100).toFixed(2)}`
  ).join(" | ")

/** Tidings' tables and the app's share one schema. */
const schema = "orders_view"
const runId = `o-${Date.now().toString(36)}`
const alice = `alice-${runId}`
const bob = `bob-${runId}`

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* Migrator.run({ schema })
  yield* createTables
  const broker = yield* MemoryBroker.MemoryBroker
  const outcomes = { applied: 0, skipped: 0, duplicate: 0, gap: 0 }

  // The consumer: at-least-once, so every message comes twice; four at a time, so an order's events
  // can arrive out of order (a gap is retried shortly, never applied early).
  yield* broker.subscribe.pipe(
    Stream.filter(({ message }) => isOrderEvent(message)),
    Stream.flatMap(({ message }) => Stream.make(message, message)),
    Stream.mapEffect((message) =>
      Projection.handle(orderList, message.id, message).pipe(
        Effect.tapError((e) => Effect.sync(() => e._tag === "ProjectionGap" && outcomes.gap++)),
        Effect.retry({
          schedule: Schedule.spaced("10 millis").pipe(Schedule.upTo({ times: 100 })),
          while: (e) => e._tag === "ProjectionGap"
        }),
        Effect.tap((outcome) => Effect.sync(() => outcomes[outcome]++)),
        Effect.catchCause((cause) => Effect.logError("projection failed", cause))
      ), { concurrency: 4, unordered: true }),
    Stream.runDrain,
    Effect.forkScoped({ startImmediately: true })
  )
  yield* Layer.build(Relay.layer({ statsInterval: false, pollInterval: { base: "20 millis", max: "200 millis" } }))

  // The write side returns what it wrote; the query waits until the view has applied it.
  yield* placeOrder(`${runId}-01`, alice, 4_200, 2)
  yield* placeOrder(`${runId}-02`, alice, 1_999, 1)
  yield* placeOrder(`${runId}-03`, bob, 15_000, 5)
  yield* payOrder(`${runId}-01`)
  yield* cancelOrder(`${runId}-03`, "out of stock")
  const shipped = yield* shipOrder(`${runId}-01`, "DHL")
  yield* say(`alice: ${show(yield* listOrders(alice, { after: shipped }))}`)
  const paid = yield* payOrder(`${runId}-02`)
  yield* say(`alice: ${show(yield* listOrders(alice, { after: paid }))}`)
  const cancelled = yield* cancelOrder(`${runId}-02`, "changed her mind")
  yield* say(`alice: ${show(yield* listOrders(alice, { after: cancelled }))}`)
  yield* say(`bob: ${show(yield* listOrders(bob))}`)
  yield* say(
    `deliveries: ${outcomes.applied} applied, ${
      outcomes.duplicate + outcomes.skipped
    } duplicates ignored, ${outcomes.gap} early events retried`
  )

  // The view is damaged (a bad deploy, a manual edit): rebuild it from the outbox and swap it in.
  yield* sql`UPDATE orders_view.order_list SET status = 'garbled' WHERE customer IN (${alice}, ${bob})`
  yield* say(`damaged alice: ${show(yield* listOrders(alice))}`)
  const rebuilt = yield* PgProjection.rebuild(orderList, {
    schema,
    fromMessage: (m) => isOrderEvent(m) ? m : undefined
  })
  yield* say(`rebuilt from the outbox: ${rebuilt.applied} events, ${rebuilt.aggregates} orders`)
  yield* say(`alice: ${show(yield* listOrders(alice))}`)
  yield* say(`bob: ${show(yield* listOrders(bob))}`)
})

const main = Effect.gen(function*() {
  yield* Effect.sync(() => console.log("[orders-view] starting PostgreSQL (embedded unless TIDINGS_PG_URL is set) ..."))
  const pg = yield* scopedPostgres()
  const Database = PgClient.layer({ url: pg.url })
  const AppLayer = Layer.mergeAll(PgOutboxStore.layer({ schema }), PgInboxStore.layer({ schema }), MemoryBroker.layer())
    .pipe(
      Layer.provideMerge(Database)
    )
  yield* Effect.scoped(program).pipe(Effect.provide(AppLayer))
})

Main.runMain(Effect.scoped(main))
