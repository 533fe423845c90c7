/**
 * Log mode scale-out: `processes` relay processes (`logWorker.ts`, each `LogRelay.layer` with its
 * own pool) of one group on one log. They start on an empty log and split its partitions by lease;
 * once every process holds its share, the backlog is appended in one transaction, and the clock
 * runs from its commit until every event was published. Each process reports the ids it published:
 * an id published twice (by one process or two) is a duplicate; the group must end with nothing
 * left (lag 0).
 * @module
 */
import type { Message } from "@tidings/core/Message"
import * as PgLogStore from "@tidings/postgres/PgLogStore"
import { Effect } from "effect"
import { type ChildProcess, fork } from "node:child_process"
import { fileURLToPath } from "node:url"
import { waitFor } from "./latency.ts"
import * as Pg from "./lib/postgres.ts"
import { log } from "./lib/report.ts"
import { round } from "./lib/stats.ts"
import { lag, partitions } from "./logMode.ts"
import type { FromLogWorker, ToLogWorker } from "./logWorker.ts"
import type { ScaleRun } from "./scaleOut.ts"

const workerPath = fileURLToPath(new URL("./logWorker.ts", import.meta.url))

interface Worker {
  readonly child: ChildProcess
  held: number
  readonly ids: Array<string>
  readonly done: Promise<void>
}

const spawn = (url: string, schema: string, workers: number, batch: number): Worker => {
  // A short lease, so that the processes settle their split quickly before the clock starts.
  const child = fork(workerPath, [url, schema, "scale", String(workers), String(batch), "3000", "1"], {
    stdio: ["ignore", "ignore", "inherit", "ipc"],
    execArgv: []
  })
  let onDone!: () => void
  const done = new Promise<void>((resolve) => (onDone = resolve))
  const w: Worker = { child, held: 0, ids: [], done }
  child.on("message", (m: FromLogWorker) => {
    if (m.type === "held") w.held = m.partitions
    else if (m.type === "published") w.ids.push(...m.ids)
    else if (m.type === "done") onDone()
    else if (m.type === "failed") {
      log(`  ! log relay process failed: ${m.error}`)
      onDone()
    }
  })
  child.on("exit", () => onDone())
  return w
}

/**
 * One scale-out drain of `msgs` by `processes` processes of `workers` workers each, batch `batch`.
 * `warm` is published first, unmeasured: fresh processes compile their hot paths on it, as
 * long-running relays would have.
 */
export const run = (
  url: string,
  processes: number,
  workers: number,
  batch: number,
  msgs: ReadonlyArray<Message>,
  warm: ReadonlyArray<Message> = []
): Effect.Effect<ScaleRun> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, 3)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("logscale")
      // NOTIFY on commit: the idle relays (polling at up to 2 s) start at once.
      const stores = yield* PgLogStore.make({ schema, partitions, notify: true }).pipe(Effect.orDie)
      const ws = yield* Effect.acquireRelease(
        Effect.sync(() => Array.from({ length: processes }, () => spawn(url, schema, workers, batch))),
        (all) => Effect.sync(() => all.forEach((w) => w.child.exitCode === null && w.child.kill()))
      )
      const split = () => ws.every((w) => w.held > 0) && ws.reduce((n, w) => n + w.held, 0) === partitions
      if (!(yield* waitFor(split, 60_000))) {
        log(`  ! log scale-out: the processes did not split the partitions (${ws.map((w) => w.held).join(" / ")})`)
      }
      // A backlog in one transaction: readable at its commit, as a burst would be.
      const appendAll = (ms: ReadonlyArray<Message>) =>
        stores.outbox.withTransaction(Effect.forEach(
          Array.from({ length: Math.ceil(ms.length / 1_000) }, (_, i) => i),
          (i) => stores.outbox.append(ms.slice(i * 1_000, (i + 1) * 1_000)),
          { discard: true }
        )).pipe(Effect.orDie)
      const total = () => ws.reduce((n, w) => n + w.ids.length, 0)
      if (warm.length > 0) {
        yield* appendAll(warm)
        yield* waitFor(() => total() >= warm.length, 60_000)
      }
      const warmed = total()
      yield* appendAll(msgs)
      const start = performance.now()
      if (!(yield* waitFor(() => total() - warmed >= msgs.length, 120_000))) {
        log(`  ! log scale-out: stuck at ${total() - warmed} of ${msgs.length} events`)
      }
      const seconds = (performance.now() - start) / 1000
      for (const w of ws) w.child.send({ type: "stop" } satisfies ToLogWorker)
      yield* Effect.promise(() => Promise.all(ws.map((w) => w.done)))
      const measured = new Set(msgs.map((m) => m.id))
      const ids = ws.flatMap((w) => w.ids.filter((id) => measured.has(id)))
      const seen = new Set(ids)
      const publishes = ids.length
      const left = yield* lag(stores.log, "scale")
      return {
        processes,
        relaysPerProcess: workers,
        batch,
        events: seen.size,
        seconds: round(seconds, 3),
        eventsPerSecond: Math.round(seen.size / seconds),
        duplicates: publishes - seen.size,
        lost: msgs.length - seen.size + Math.max(0, left),
        perProcess: ws.map((w) => w.ids.filter((id) => measured.has(id)).length)
      } satisfies ScaleRun
    }).pipe(Effect.provideContext(context))
  }))
