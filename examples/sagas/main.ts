/**
 * The saga example (`node examples/sagas/main.ts`): starts an embedded PostgreSQL (or uses
 * TIDINGS_PG_URL) and creates orders with the create-order saga — reserve inventory, charge the
 * payment, confirm — first synchronously (`Saga.run`), then asynchronously over the outbox and the
 * in-memory broker (`Saga.start` + `Saga.handleReply`), printing what each saga did and the stock.
 */
import { Main, MemoryBroker, Relay, Saga } from "@tidings/core"
import { Migrator, PgClient, PgOutboxStore, PgSagaStore } from "@tidings/postgres"
import { Effect, Layer, Option, Schedule, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { scopedPostgres } from "../../test/support/embeddedPostgres.ts"
import { CreateOrder, CreateOrderAsync, createTables, type OrderInput, participant } from "./createOrder.ts"

const say = (line: string) => Effect.sync(() => console.log(`[sagas] ${line}`))

const describe = (state: Saga.State) =>
  `${state.status.padEnd(11)} steps: ${state.steps.map((s) => `${s.name}=${s.status}`).join(", ")}${
    state.error === null ? "" : `\n${" ".repeat(22)}error: ${state.error}`
  }`

const stock = SqlClient.SqlClient.use((sql) =>
  sql<{ available: number }>`SELECT available FROM shop.stock WHERE sku = 'book'`
).pipe(
  Effect.map((rows) => rows[0]?.available ?? 0)
)

const synchronous = Effect.gen(function*() {
  yield* say("— synchronous: Saga.run executes the steps here, persisting each outcome —")
  const orders: Array<OrderInput> = [
    { orderId: `${runId}-1`, sku: "book", quantity: 2, cents: 4_200 },
    { orderId: `${runId}-2`, sku: "book", quantity: 1, cents: 90_000 }, // declined: compensated
    { orderId: `${runId}-3`, sku: "book", quantity: 1, cents: 66_666 }, // the gateway hangs: timeout, compensated
    { orderId: `${runId}-4`, sku: "book", quantity: 50, cents: 1_000 } // out of stock: nothing to undo
  ]
  for (const order of orders) {
    const started = Date.now()
    const result = yield* Effect.result(Saga.run(CreateOrder, order))
    const id = result._tag === "Success"
      ? result.success.id
      : "sagaId" in result.failure
      ? String(result.failure.sagaId)
      : undefined
    const outcome = result._tag === "Success" ? "completed" : `${result.failure._tag}`
    yield* say(
      `${order.orderId} (${order.quantity} × book, ${(order.cents / 100).toFixed(2)}): ${outcome} in ${
        Date.now() - started
      } ms`
    )
    if (id !== undefined) yield* say(`  Saga.get → ${describe(yield* Saga.get(id))}`)
    yield* say(`  stock of book: ${yield* stock}`)
  }
})

const asynchronous = Effect.gen(function*() {
  yield* say("— asynchronous: Saga.start writes the saga and its first command in the caller's transaction —")
  const sql = yield* SqlClient.SqlClient
  const broker = yield* MemoryBroker.MemoryBroker
  const registry = Saga.registry(CreateOrderAsync)
  // Consumers: commands go to the participants, replies to the orchestrator.
  yield* broker.subscribe.pipe(
    Stream.runForEach(({ message }) =>
      Effect.gen(function*() {
        if (message.type === Saga.ReplyEvent.type) return yield* Saga.handleReply(registry, message)
        const command = Saga.commandOf(message)
        if (Option.isSome(command)) yield* participant(command.value)
      })
    ),
    Effect.catchCause((cause) => Effect.logError("consumer stopped", cause)),
    Effect.forkScoped({ startImmediately: true }) // subscribed before anything is published
  )
  yield* Layer.build(Relay.layer({ statsInterval: false, pollInterval: { base: "20 millis", max: "200 millis" } }))
  yield* Layer.build(Saga.recovery({ registry, interval: "1 second" }))
  const orders: Array<OrderInput> = [
    { orderId: `${runId}-5`, sku: "book", quantity: 1, cents: 2_500 },
    { orderId: `${runId}-6`, sku: "book", quantity: 3, cents: 75_000 } // declined: compensated by a release command
  ]
  const ids: Array<string> = []
  for (const order of orders) {
    // the business change would go in the same transaction
    ids.push(yield* sql.withTransaction(Saga.start(CreateOrderAsync, order)))
    yield* say(`${order.orderId}: saga started (returned at once)`)
  }
  // Polled every 20 ms until both sagas have finished (however long a loaded machine takes).
  const final = yield* Effect.forEach(ids, (id) => Saga.get(id)).pipe(
    Effect.repeat({
      until: (states) => states.every((s) => s.status !== "running" && s.status !== "compensating"),
      schedule: Schedule.spaced("20 millis")
    })
  )
  for (const [i, state] of final.entries()) yield* say(`${orders[i]!.orderId}: ${describe(state)}`)
  yield* say(`stock of book: ${yield* stock}`)
  const published = (yield* broker.delivered).map((d) => d.message.type)
  yield* say(`events through the outbox: ${published.join(", ")}`)
})

const runId = `ord-${Date.now().toString(36)}`
/** The app's schema: its own tables and Tidings' live there. */
const schema = "shop"

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* Migrator.run({ schema }) // Tidings' tables: outbox, saga, saga_step
  yield* createTables
  yield* sql`INSERT INTO shop.stock (sku, available) VALUES ('book', 10) ON CONFLICT (sku) DO UPDATE SET available = 10`
  yield* say("stock of book: 10")
  yield* synchronous
  yield* Effect.scoped(asynchronous)
})

const main = Effect.gen(function*() {
  yield* Effect.sync(() => console.log("[sagas] starting PostgreSQL (embedded unless TIDINGS_PG_URL is set) ..."))
  const pg = yield* scopedPostgres()
  const Database = PgClient.layer({ url: pg.url })
  const AppLayer = Layer.mergeAll(PgSagaStore.layer({ schema }), PgOutboxStore.layer({ schema }), MemoryBroker.layer())
    .pipe(
      Layer.provideMerge(Database)
    )
  yield* program.pipe(Effect.provide(AppLayer))
})

Main.runMain(Effect.scoped(main))
