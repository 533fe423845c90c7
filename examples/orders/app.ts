/**
 * The orders service as a Hono app on an Effect runtime: the layers (Postgres stores, the broker and
 * its consumers, the relay, saga recovery) and the routes (the service's own, plus the Tidings admin,
 * health and metrics routes of `@tidings/hono`).
 *
 * | route | what |
 * |---|---|
 * | `POST /orders` | place an order: `{ customer, sku, quantity, amountCents, orderId? }` → 202 (200 when `orderId` exists) |
 * | `GET /orders?customer=` | the order list (the projection) |
 * | `GET /orders/:id` | one order as written, with its saga's status and steps |
 * | `GET /stock` | stock by SKU |
 * | `GET /health`, `GET /ready`, `GET /metrics` | liveness, readiness (Postgres, broker, relay; details with the token), Prometheus |
 * | `/admin/sagas/:id`, `/admin/outbox/...`, `/admin/inbox/...`, `/admin/dead-letters` | Tidings' admin views (bearer token) |
 * | `GET /admin/console` | the operator console (a web page; asks for the admin token) |
 * | `POST /admin/faults/publish`, `GET /admin/broker` | the demo's fault switch; the broker and its dead letters (bearer token) |
 */
import { Health, Relay, Saga } from "@tidings/core"
import { Auth, Command, Console, Input, Routes, Runtime, Safety } from "@tidings/hono"
import { Migrator, PgClient, PgInboxStore, PgOutboxStore, PgSagaStore } from "@tidings/postgres"
import { Effect, Layer, Redacted, Schema } from "effect"
import { Hono } from "hono"
import * as Domain from "./domain.ts"
import * as Faults from "./faults.ts"
import * as Transport from "./transport.ts"

/** What the message handlers need: the SQL client and the stores. */
type HandlerServices = Effect.Services<ReturnType<Domain.Orders["handlers"][keyof Domain.Orders["handlers"]]>>

/** How to run the service. */
export interface Options {
  readonly pg: PgClient.PgClientConfig
  /** Schema of Tidings' tables and the service's own. */
  readonly schema: string
  readonly transport: Transport.Transport
  readonly relay: Relay.Config
}

/** The service's layers: everything the routes need, with the background workers running while it lives. */
export const layer = (options: Options) => {
  const orders = Domain.make(options.schema)
  const schema = options.schema
  const Database = PgClient.layer(options.pg)
  const Stores = Layer.mergeAll(
    PgOutboxStore.layer({ schema }),
    PgInboxStore.layer({ schema }),
    PgSagaStore.layer({ schema }),
    // Tables first: consumers and the relay start only after this.
    Layer.effectDiscard(Effect.andThen(Migrator.run({ schema }), orders.createTables))
  )
  const consumers: ReadonlyArray<Transport.ConsumerSpec<unknown, HandlerServices>> = [
    { name: Domain.consumers.inventory, types: Domain.bindings.inventory, handler: orders.handlers.inventory },
    { name: Domain.consumers.payment, types: Domain.bindings.payment, handler: orders.handlers.payment },
    { name: Domain.consumers.orchestrator, types: Domain.bindings.orchestrator, handler: orders.handlers.orchestrator },
    { name: Domain.consumers.projection, types: Domain.bindings.projection, handler: orders.handlers.projection }
  ]
  const Broker = Transport.layer(options.transport, consumers)
  const Publishing = Faults.layer.pipe(Layer.provideMerge(Broker))
  const Workers = Layer.mergeAll(
    Relay.layer(options.relay),
    Saga.recovery({ registry: Domain.sagas, interval: "1 second" })
  )
  return Workers.pipe(Layer.provideMerge(Publishing), Layer.provideMerge(Stores), Layer.provideMerge(Database))
}

/** What the routes run with. */
export type Services = Layer.Success<ReturnType<typeof layer>>

const ListQuery = Schema.Struct({
  customer: Schema.optional(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(64)))
})
const OrderId = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(64))

/** The Hono app on a built runtime. */
export const routes = (
  rt: Runtime.Runtime<Services>,
  options: { readonly schema: string; readonly adminToken: Redacted.Redacted<string> }
) => {
  const orders = Domain.make(options.schema)
  const auth = options.adminToken
  // Safe defaults first: 1 MiB bodies (413), JSON only (415), clean paths and queries (400), 404 / 405
  // and thrown errors in the JSON error shape.
  const app = Safety.app()

  app.post(
    "/orders",
    rt.handler((c) =>
      Effect.gen(function*() {
        const body = yield* Input.json(c, Domain.OrderRequest)
        const { order, created } = yield* Command.transaction(orders.placeOrder(body))
        return c.json({ order, created }, created ? 202 : 200, { location: `/orders/${order.id}` })
      })
    )
  )
  app.get(
    "/orders",
    rt.handler((c) =>
      Effect.gen(function*() {
        const { customer } = yield* Input.query(c, ListQuery)
        return { orders: yield* orders.listOrders(customer) }
      })
    )
  )
  app.get(
    "/orders/:id",
    rt.handler((c) =>
      Effect.gen(function*() {
        const order = yield* orders.getOrder(yield* Input.param(c, "id", OrderId))
        const saga = yield* Saga.get(order.saga_id)
        return {
          order,
          saga: {
            id: saga.id,
            status: saga.status,
            error: saga.error,
            steps: saga.steps.map((s) => ({ name: s.name, status: s.status, error: s.error }))
          }
        }
      })
    )
  )
  app.get("/stock", rt.handler(() => Effect.map(orders.stock, (stock) => ({ stock }))))

  const checks: Array<Health.Check<any>> = [
    PgClient.readiness,
    Health.make("broker", Transport.Broker.use((b) => b.isReady), "the broker connection is down"),
    Health.relay
  ]
  // Anonymous probes see names and up / down; the admin token also gets why a check is down.
  app.route("/", Routes.health(rt, { checks, auth }))
  app.route("/", Routes.metrics(rt))
  app.route("/admin/sagas", Routes.sagas(rt, { auth }))
  app.route("/admin/outbox", Routes.outbox(rt, { auth }))
  app.route("/admin/inbox", Routes.inbox(rt, { auth }))
  app.route("/admin/dead-letters", Routes.deadLetters(rt, { auth }))
  // The operator console: same token, same checks; RabbitMQ's dead-letter queues when on RabbitMQ.
  const onRabbit = rt.managed.runSync(Transport.Broker.use((b) => Effect.succeed(b.deadLetterQueues !== undefined)))
  const deadLetterQueues: Console.DeadLetterQueues<Transport.Broker> = {
    list: Transport.Broker.use((b) => b.deadLetterQueues!.list),
    peek: (queue, limit) => Transport.Broker.use((b) => b.deadLetterQueues!.peek(queue, limit)),
    replay: (queue, options) => Transport.Broker.use((b) => b.deadLetterQueues!.replay(queue, options))
  }
  app.route("/admin/console", Console.routes(rt, { auth, checks, ...(onRabbit ? { deadLetterQueues } : {}) }))

  const admin = new Hono()
  admin.use("*", Auth.bearer(auth))
  admin.post(
    "/faults/publish",
    rt.handler((c) =>
      Effect.gen(function*() {
        const request = yield* Input.json(c, Faults.FaultRequest)
        return { armed: yield* Faults.PublishFaults.use((f) => f.arm(request)) }
      }), { status: 201 })
  )
  admin.get(
    "/broker",
    rt.handler(() =>
      Effect.gen(function*() {
        const broker = yield* Transport.Broker
        const faults = yield* Faults.PublishFaults
        return {
          kind: broker.kind,
          description: broker.description,
          deadLetters: yield* broker.deadLetters,
          faults: { armed: yield* faults.rules, refused: yield* faults.refused }
        }
      })
    )
  )
  app.route("/admin", admin)
  return app
}
