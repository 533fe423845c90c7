/**
 * A log relay process of the benchmarks (`logLatency.ts` and `logScale.ts` fork it):
 * `node logWorker.ts <url> <schema> <group> <workers> <batch> <lease ms> <listen: 0|1>`.
 *
 * It opens its pool and starts `LogRelay.layer` at once (publishing to the in-memory broker; with
 * `listen`, woken by `PgWakeup`'s LISTEN as a relay in another process is), then reports: `held`
 * whenever the partitions it holds change, `published` batches of (id, time) pairs every 10 ms
 * (`process.hrtime`, the same monotonic clock in every process of the machine), and, on `stop`,
 * shuts the relay down (in-flight batches settle, leases released) and sends `done` with the CPU time
 * the process spent meanwhile.
 * @module
 */
import "./lib/stdio.ts" // first: keeps stray console output off stdout
import * as LogRelay from "@tidings/core/LogRelay"
import * as LogStore from "@tidings/core/LogStore"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import * as Wakeup from "@tidings/core/Wakeup"
import * as PgLogStore from "@tidings/postgres/PgLogStore"
import * as PgWakeup from "@tidings/postgres/PgWakeup"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, References, Schedule, Scope } from "effect"
import { monotonicMs } from "./lib/monotonic.ts"
import * as Pg from "./lib/postgres.ts"
import { memoryPublisher } from "./lib/publishers.ts"

/** Messages from the coordinator. */
export type ToLogWorker = { readonly type: "stop" }
/** Messages to the coordinator. */
export type FromLogWorker =
  | { readonly type: "held"; readonly partitions: number }
  | { readonly type: "published"; readonly ids: ReadonlyArray<string>; readonly at: ReadonlyArray<number> }
  /** `cpuMs`: the process's CPU time (user + system) from the relay's start to its stop. */
  | { readonly type: "done"; readonly cpuMs: number }
  | { readonly type: "failed"; readonly error: string }

const send = (message: FromLogWorker) =>
  new Promise<void>((resolve) => process.send!(message, undefined, {}, () => resolve()))

const [url, schema, group, workers, batch, leaseMs, listen] = process.argv.slice(2)

const program = Effect.gen(function*() {
  const stop = yield* Deferred.make<void>()
  process.on("message", (m: ToLogWorker) => {
    if (m.type === "stop") Effect.runSync(Deferred.succeed(stop, undefined))
  })
  const context = yield* Pg.openPool(url!, Number(workers) + 3)
  yield* Effect.gen(function*() {
    const stores = yield* PgLogStore.make({ schema: schema! }).pipe(Effect.orDie)
    const inner = yield* memoryPublisher
    let ids: Array<string> = []
    let at: Array<number> = []
    const publisher = Publisher.of({
      publish: (messages) =>
        Effect.tap(inner.publish(messages), (results) =>
          Effect.sync(() => {
            const now = monotonicMs()
            for (const r of results) {
              if (r._tag !== "Published") continue
              ids.push(r.id)
              at.push(now)
            }
          }))
    })
    const flush = Effect.suspend(() => {
      if (ids.length === 0) return Effect.void
      const message: FromLogWorker = { type: "published", ids, at }
      ids = []
      at = []
      return Effect.promise(() => send(message))
    })
    const hub = Wakeup.makeHub()
    const scope = yield* Scope.make()
    const built = yield* Layer.buildWithScope(
      Layer.mergeAll(
        LogRelay.layer({
          group: group!,
          concurrency: Number(workers),
          batchSize: Number(batch),
          lease: Number(leaseMs),
          statsInterval: false,
          retention: false
        }),
        listen === "1" ? PgWakeup.layer({ schema: schema! }) : Layer.empty
      ).pipe(Layer.provide(Layer.mergeAll(
        Layer.succeed(LogStore.LogStore)(stores.log),
        Layer.succeed(OutboxStore)(stores.outbox),
        Layer.succeed(Publisher)(publisher),
        Layer.succeed(Wakeup.Wakeups)(hub)
      ))),
      scope
    ).pipe(Effect.orDie)
    const relay = Context.get(built, LogRelay.LogRelay)
    let held = -1
    const report = Effect.gen(function*() {
      const n = (yield* relay.partitions).length
      if (n !== held) {
        held = n
        yield* Effect.promise(() => send({ type: "held", partitions: n }))
      }
      yield* flush
    })
    const cpu = process.cpuUsage()
    const reporting = yield* Effect.forkChild(report.pipe(Effect.repeat(Schedule.spaced("10 millis"))))
    yield* Deferred.await(stop)
    // Graceful: in-flight batches are published and settled, the leases released.
    yield* Scope.close(scope, Exit.void)
    const used = process.cpuUsage(cpu)
    yield* Fiber.interrupt(reporting)
    yield* flush
    yield* Effect.promise(() => send({ type: "done", cpuMs: (used.user + used.system) / 1000 }))
  }).pipe(Effect.provideContext(context))
})

const exit = await Effect.runPromiseExit(
  program.pipe(Effect.scoped, Effect.provideService(References.LogToStderr, true))
)
if (Exit.isFailure(exit)) {
  await send({ type: "failed", error: Cause.pretty(exit.cause) })
  process.exitCode = 1
}
process.disconnect?.()
