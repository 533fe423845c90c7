/**
 * A relay process of the suite's scale-out runs (`scaleOut.ts` forks it):
 * `node scaleWorker.ts <url> <schema> <relays> <batch> <name>`.
 *
 * It opens its pool, builds the store and says `ready`; on `go` it starts `Relay.layer` (`relays`
 * pollers, batch `batch`) publishing to the in-memory broker, and reports how many events it has
 * published after every publish (so that the coordinator sees the last one at once); on `stop` it
 * shuts the relay down (in-flight batches settle) and sends every id it published, then exits.
 * @module
 */
import "./lib/stdio.ts" // first: keeps stray console output off stdout
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as Wakeup from "@tidings/core/Wakeup"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { Cause, Deferred, Effect, Exit, Layer, References, Scope } from "effect"
import * as Pg from "./lib/postgres.ts"
import { memoryPublisher } from "./lib/publishers.ts"

/** Messages between the coordinator and a relay process. */
export type ToWorker = { readonly type: "go" } | { readonly type: "stop" }
export type FromWorker =
  | { readonly type: "ready" }
  | { readonly type: "progress"; readonly published: number }
  | { readonly type: "done"; readonly ids: ReadonlyArray<string> }
  | { readonly type: "failed"; readonly error: string }

const send = (message: FromWorker) =>
  new Promise<void>((resolve) => process.send!(message, undefined, {}, () => resolve()))

const [url, schema, relays, batch, name] = process.argv.slice(2)

const program = Effect.gen(function*() {
  const go = yield* Deferred.make<void>()
  const stop = yield* Deferred.make<void>()
  process.on("message", (m: ToWorker) => {
    if (m.type === "go") Effect.runSync(Deferred.succeed(go, undefined))
    if (m.type === "stop") Effect.runSync(Deferred.succeed(stop, undefined))
  })
  const context = yield* Pg.openPool(url!, Number(relays) + 2)
  yield* Effect.gen(function*() {
    const store = yield* PgOutboxStore.make({ schema: schema! }).pipe(Effect.orDie)
    const inner = yield* memoryPublisher
    const ids: Array<string> = []
    const publisher = Publisher.of({
      publish: (messages) =>
        Effect.tap(inner.publish(messages), (results) =>
          Effect.sync(() => {
            for (const r of results) if (r._tag === "Published") ids.push(r.id)
            void send({ type: "progress", published: ids.length })
          }))
    })
    yield* Effect.promise(() => send({ type: "ready" }))
    yield* Deferred.await(go)
    const scope = yield* Scope.make()
    yield* Layer.buildWithScope(
      Relay.layer({
        name: name!,
        concurrency: Number(relays),
        batchSize: Number(batch),
        statsInterval: false,
        retention: false
      }).pipe(
        Layer.provide(Layer.mergeAll(
          Layer.succeed(OutboxStore)(store),
          Layer.succeed(Publisher)(publisher),
          // No NOTIFY: the rows are all there before the relays start, and polling finds them.
          Layer.succeed(Wakeup.Wakeups)(Wakeup.makeHub())
        ))
      ),
      scope
    ).pipe(Effect.orDie)
    yield* Deferred.await(stop)
    // Graceful shutdown: in-flight batches are published and settled.
    yield* Scope.close(scope, Exit.void)
    yield* Effect.promise(() => send({ type: "done", ids }))
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
