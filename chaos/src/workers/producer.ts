/**
 * A producer process: commits transactions at a paced rate, each inserting a `chaos.orders` row and
 * appending its `OrderPlaced` event; a share of them roll back on purpose after appending (recorded
 * in `chaos.rollbacks` once rolled back). With CHAOS_EAGER_RELAY=1 it also runs a relay with eager
 * dispatch, so its own events are published right after their commit from inside this process.
 * Failed transactions (database gone, backend terminated) are counted and the loop goes on. Stops
 * producing on the harness's `stop-producing` and keeps its relay running until SIGTERM.
 *
 * Environment (besides settings.ts): CHAOS_RATE (transactions/s of this process), CHAOS_ROLLBACK
 * (share rolled back), CHAOS_SEED, CHAOS_EAGER_RELAY.
 * @module
 */
import { Outbox, Relay } from "@tidings/core"
import { PgOutboxStore } from "@tidings/postgres"
import { Data, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { OrderPlaced } from "../event.ts"
import * as Random from "../random.ts"
import * as Tables from "../tables.ts"
import { type Control, env, run } from "./lifecycle.ts"
import * as Settings from "./settings.ts"

class DeliberateRollback
  extends Data.TaggedError("DeliberateRollback")<{ readonly orderId: string; readonly eventId: string }>
{}

const rate = Number(env("CHAOS_RATE"))
const rollbackRatio = Number(env("CHAOS_ROLLBACK"))
// Another sequence per incarnation, the same for the same seed.
const random = Random.make((Number(env("CHAOS_SEED")) + Settings.incarnation * 104729) >>> 0)
const eagerRelay = process.env["CHAOS_EAGER_RELAY"] === "1"
// Several lanes, so that one transaction stuck on a dying connection does not stop the others, and
// at most 5 transactions/s each, so that a slow commit on a loaded machine does not cap the rate.
const lanes = Math.max(4, Math.ceil(rate / 5))

const counts = { committed: 0, rolledBack: 0, failed: 0 }
let seq = 0
let lastErrorLog = 0

const transaction = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const n = seq++
  const orderId = `${Settings.name}.${Settings.incarnation}.${n}`
  const rollback = random.next() < rollbackRatio
  const outcome = yield* sql.withTransaction(Effect.gen(function*() {
    const message = yield* Outbox.append(OrderPlaced, {
      aggregateId: orderId,
      payload: { orderId, producer: Settings.name, seq: n }
    })
    yield* sql`INSERT INTO ${
      sql(Tables.orders)
    } (order_id, event_id, producer, seq) VALUES (${orderId}, ${message.id}, ${Settings.name}, ${n})`
    if (rollback) return yield* new DeliberateRollback({ orderId, eventId: message.id })
  })).pipe(Effect.result)
  if (outcome._tag === "Success") {
    counts.committed++
    return
  }
  const error = outcome.failure
  if (error instanceof DeliberateRollback) {
    counts.rolledBack++
    yield* sql`INSERT INTO ${
      sql(Tables.rollbacks)
    } (order_id, event_id, producer) VALUES (${error.orderId}, ${error.eventId}, ${Settings.name})`.pipe(Effect.ignore)
    return
  }
  counts.failed++
  if (Date.now() - lastErrorLog > 1000) {
    lastErrorLog = Date.now()
    yield* Effect.logWarning(
      `transaction failed (${counts.failed} so far): ${String((error as { message?: unknown }).message ?? error)}`
    )
  }
})

/** One lane: `rate / lanes` transactions per second, without bursts after a stall. */
const lane = (offsetMs: number) =>
  Effect.gen(function*() {
    const interval = (1000 * lanes) / rate
    let next = Date.now() + offsetMs
    while (true) {
      const wait = next - Date.now()
      if (wait > 0) yield* Effect.sleep(wait)
      else if (wait < -interval) next = Date.now()
      yield* transaction
      next += interval
    }
  })

const program = (control: Control) =>
  Effect.gen(function*() {
    if (eagerRelay) {
      yield* Layer.build(
        Relay.layer({ name: Settings.name, lease: Settings.lease }).pipe(Layer.provide(Settings.publisher))
      )
    }
    yield* control.ready
    const producing = yield* Effect.forEach(
      Array.from({ length: lanes }, (_, i) => i),
      (i) => Effect.forkScoped(lane((i * 1000) / rate))
    )
    yield* Effect.addFinalizer(() =>
      Effect.sync(() =>
        process.stderr.write(
          `[${Settings.name}] committed ${counts.committed}, rolled back ${counts.rolledBack}, failed ${counts.failed}\n`
        )
      )
    )
    yield* control.command("stop-producing")
    yield* Fiber.interruptAll(producing)
    yield* Effect.sync(() => void process.stdout.write("stopped-producing\n"))
    return yield* Effect.never
  }).pipe(
    // Scoped inside the database layer, so that the lanes and the eager relay stop before the
    // client they use closes: see lifecycle.ts.
    Effect.scoped,
    Effect.provide(
      PgOutboxStore.layer({ schema: Tables.tidingsSchema, notify: true }).pipe(
        Layer.provideMerge(Settings.database(lanes + 4))
      )
    )
  )

run(Settings.name, program)
