/**
 * Recipe: the relay as its own worker process (docs/recipes/relay-worker.md).
 *
 * `npm run example -- relay-worker -- --worker` is the worker: a relay on the outbox of
 * TIDINGS_PG_URL, woken by the producers' NOTIFY, publishing to RabbitMQ (TIDINGS_AMQP_URL) or the
 * in-memory broker, configured by the `TIDINGS_*` variables; it runs until SIGINT / SIGTERM, then
 * releases its claims and exits 0.
 *
 * `npm run example -- relay-worker` shows it working: starts PostgreSQL (embedded unless
 * TIDINGS_PG_URL is set), starts the worker as a child process, then acts as a producer without a
 * relay of its own (its store sends NOTIFY after each commit), and prints how soon the worker
 * published each event. Then it stops the worker with SIGTERM and exits 0.
 */
import { Event, Main, MemoryBroker, Outbox, OutboxStore, Relay, Settings } from "@tidings/core"
import { Migrator, PgClient, PgOutboxStore, PgWakeup } from "@tidings/postgres"
import { AmqpConnection, AmqpPublisher, Topology } from "@tidings/rabbitmq"
import { Config, Effect, Layer, Option, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { spawn } from "node:child_process"
import { scopedPostgres } from "../../test/support/embeddedPostgres.ts"

const schema = "relay_worker"

/**
 * RabbitMQ's names for this recipe: the exchange the relay publishes to, and one queue bound to it.
 * The publisher uses `mandatory`: an event no queue is bound for is retried by the relay, never lost,
 * so something must be bound before events flow (your consumers' queues; here an audit queue whose
 * messages expire after a minute).
 */
const topology = Topology.make({
  exchanges: [{ name: "tidings.recipes.worker" }],
  queues: [{ name: "tidings.recipes.worker.audit", type: "classic", messageTtl: "1 minute" }],
  bindings: [{ exchange: "tidings.recipes.worker", queue: "tidings.recipes.worker.audit", routingKey: "#" }]
})

/**
 * The worker's settings, from the environment (the root README's table of `TIDINGS_*` variables):
 * `TIDINGS_PG_URL` (required) and `TIDINGS_PG_*`, `TIDINGS_SCHEMA`, `TIDINGS_RELAY_*`, and
 * `TIDINGS_AMQP_URL` (RabbitMQ; unset: the in-memory broker) with `TIDINGS_AMQP_*`. Read in one go:
 * a wrong configuration stops the start with one error naming every wrong variable.
 */
const workerSettings = Effect.gen(function*() {
  const amqpSet = Option.isSome(
    yield* Config.option(Config.String("TIDINGS_AMQP_URL")).pipe(Effect.orElseSucceed(() => Option.none()))
  )
  return yield* Settings.all({
    pg: Settings.read(PgClient.environment, { defaults: { applicationName: "relay-worker" } }),
    store: Settings.read(PgOutboxStore.environment, { defaults: { schema } }),
    relay: Relay.config({ defaults: { concurrency: 2 } }),
    amqp: amqpSet
      ? Settings.read(AmqpConnection.environment, { defaults: { name: "relay-worker" } })
      : Effect.succeed(undefined)
  })
})

type WorkerSettings = Effect.Success<typeof workerSettings>

const publisher = (amqp: WorkerSettings["amqp"]) =>
  amqp === undefined
    ? MemoryBroker.layer()
    : AmqpPublisher.layer({ exchange: "tidings.recipes.worker" }).pipe(
      Layer.provide(AmqpConnection.layer({ ...amqp, topology }))
    )

/**
 * The worker: a relay and nothing else. `PgWakeup.layer({ schema })` listens for the producers'
 * NOTIFY on that schema's outbox, so the relay claims new events about a millisecond after their
 * commit instead of at its next poll.
 */
const Worker = (s: WorkerSettings) =>
  Layer.effectDiscard(Effect.sync(() => console.log("[worker] relay running; Ctrl-C stops"))).pipe(
    Layer.provideMerge(Relay.layer(s.relay)),
    Layer.provideMerge(PgWakeup.layer({ schema: s.store.schema })),
    Layer.provideMerge(PgOutboxStore.layer(s.store)),
    Layer.provideMerge(publisher(s.amqp)),
    Layer.provideMerge(PgClient.layer(s.pg))
  )

const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String })
})

/**
 * A producer without a relay: its store sends NOTIFY after each commit (`notify: true`), which is
 * the other half of the worker's `PgWakeup.layer()`.
 */
const Producer = (pgUrl: string) =>
  PgOutboxStore.layer({ schema, notify: true }).pipe(Layer.provideMerge(PgClient.layer({ url: pgUrl })))

const say = (line: string) => Effect.sync(() => console.log(`[producer] ${line}`))

/** This file again, as the worker, on the runtime running it (Node, Deno or Bun). */
const startWorker = (pgUrl: string) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly stop: () => Promise<number | string> }>((resume) => {
      const deno = (globalThis as { Deno?: { execPath(): string } }).Deno
      const [cmd, args] = deno !== undefined ? [deno.execPath(), ["run", "-A"]] : [process.execPath, []]
      const child = spawn(cmd, [...args, import.meta.filename, "--worker"], {
        env: { ...process.env, TIDINGS_PG_URL: pgUrl, TIDINGS_SCHEMA: schema },
        stdio: ["ignore", "pipe", "inherit"]
      })
      const exited = new Promise<number | string>((resolve) =>
        child.once("exit", (code, signal) => resolve(code ?? signal ?? -1))
      )
      const stop = () => {
        if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, "SIGTERM")
        return exited
      }
      child.stdout.on("data", (d: Buffer) => {
        process.stdout.write(d)
        if (d.toString().includes("Ctrl-C stops")) resume(Effect.succeed({ stop }))
      })
      exited.then((code) => resume(Effect.die(new Error(`the worker exited (${code}) before it ran`))))
    }),
    ({ stop }) => Effect.promise(stop)
  )

const demo = Effect.gen(function*() {
  const pg = yield* scopedPostgres()
  yield* Migrator.run({ schema }).pipe(Effect.provide(PgClient.layer({ url: pg.url })))
  const worker = yield* startWorker(pg.url)
  yield* Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const store = yield* OutboxStore.OutboxStore
    const before = (yield* store.stats).published
    const runId = Date.now().toString(36)
    for (let i = 1; i <= 3; i++) {
      yield* sql.withTransaction(
        Outbox.append(OrderPlaced, { aggregateId: `${runId}-${i}`, payload: { orderId: `${runId}-${i}` } })
      )
    }
    const committed = Date.now()
    yield* say("3 events committed; no relay in this process")
    const stats = yield* store.stats.pipe(
      Effect.repeat({
        schedule: Schedule.spaced("10 millis"),
        until: (s) => s.published - before >= 3 && s.pending === 0 && s.processing === 0
      })
    )
    yield* say(`the worker published all 3 within ${Date.now() - committed} ms of the last commit`)
    yield* say(`outbox: ${stats.pending} pending, ${stats.processing} processing, ${stats.failed} failed`)
  }).pipe(Effect.provide(Producer(pg.url)))
  yield* Effect.promise(worker.stop).pipe(
    Effect.flatMap((code) => say(`worker stopped on SIGTERM (exit ${code})`))
  )
})

if (process.argv.includes("--worker")) {
  // Migrations first (safe from every instance: the migrator takes an advisory lock), then the relay until a signal.
  Main.runMain(
    Effect.gen(function*() {
      const s = yield* workerSettings
      yield* Migrator.run({ schema: s.store.schema }).pipe(Effect.provide(PgClient.layer(s.pg)))
      yield* Layer.launch(Worker(s))
    }).pipe(
      // Said once the relay has released its claims and the pool is closed.
      Effect.onInterrupt(() => Effect.sync(() => console.log("[worker] stopped")))
    )
  )
} else {
  Main.runMain(Effect.scoped(demo))
}
