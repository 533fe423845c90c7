/**
 * A relay process: `Relay.layer` with `AmqpPublisher`, woken across processes by `PgWakeup`
 * (producers append with `notify: true`) and otherwise polling. Library defaults (retry schedule,
 * attempts, crash-loop guard, shutdown timeout) except the lease (see settings.ts).
 * @module
 */
import { Relay } from "@tidings/core"
import { PgOutboxStore, PgWakeup } from "@tidings/postgres"
import { Effect, Layer } from "effect"
import * as Tables from "../tables.ts"
import { type Control, run } from "./lifecycle.ts"
import * as Settings from "./settings.ts"

const concurrency = 4

const program = (control: Control) =>
  Effect.gen(function*() {
    yield* Layer.build(
      Layer.mergeAll(
        Relay.layer({ name: Settings.name, concurrency, lease: Settings.lease }).pipe(
          Layer.provide(Settings.publisher)
        ),
        PgWakeup.layer({ schema: Tables.tidingsSchema })
      )
    )
    yield* control.ready
    return yield* Effect.never
  }).pipe(
    // Scoped inside the database layer, so that the relay closes (releasing its claims) before the
    // client it settles through: see lifecycle.ts.
    Effect.scoped,
    Effect.provide(
      PgOutboxStore.layer({ schema: Tables.tidingsSchema }).pipe(Layer.provideMerge(Settings.database(concurrency + 3)))
    )
  )

run(Settings.name, program)
