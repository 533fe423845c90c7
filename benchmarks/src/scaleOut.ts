/**
 * Scale-out: `processes` relay processes (`scaleWorker.ts`, each with its own pool and `Relay.layer`)
 * drain one outbox table together. The clock runs from telling every process to go until the last
 * one has shut its relays down (every batch settled). Each process sends back the ids it published:
 * an id published by two processes (or twice by one) is a duplicate; the table must end with every
 * event published and nothing else.
 * @module
 */
import type { Message } from "@tidings/core/Message"
import { Effect } from "effect"
import { type ChildProcess, fork } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Claim from "./claim.ts"
import * as Pg from "./lib/postgres.ts"
import { log } from "./lib/report.ts"
import { round } from "./lib/stats.ts"
import type { FromWorker, ToWorker } from "./scaleWorker.ts"

/** One scale-out drain. */
export interface ScaleRun {
  readonly processes: number
  readonly relaysPerProcess: number
  readonly batch: number
  readonly events: number
  readonly seconds: number
  readonly eventsPerSecond: number
  /** Publishes of an id already published (by any process). */
  readonly duplicates: number
  /** Events not published (or table rows not `published`) at the end. */
  readonly lost: number
  /** Events published by each process. */
  readonly perProcess: ReadonlyArray<number>
}

const workerPath = fileURLToPath(new URL("./scaleWorker.ts", import.meta.url))

interface Worker {
  readonly child: ChildProcess
  published: number
  ids: ReadonlyArray<string> | undefined
  readonly ready: Promise<void>
  readonly done: Promise<void>
}

const spawn = (url: string, schema: string, relays: number, batch: number, index: number): Worker => {
  const child = fork(workerPath, [url, schema, String(relays), String(batch), `p${index}`], {
    stdio: ["ignore", "ignore", "inherit", "ipc"],
    // The benchmark's own flags (none today) must not leak into the children.
    execArgv: []
  })
  let onReady!: () => void
  let onDone!: () => void
  let onFail!: (e: Error) => void
  const ready = new Promise<void>((resolve, reject) => {
    onReady = resolve
    onFail = reject
  })
  const done = new Promise<void>((resolve, reject) => {
    onDone = resolve
    const previous = onFail
    onFail = (e) => {
      previous(e)
      reject(e)
    }
  })
  // Both promises may reject without anyone awaiting one of them yet.
  ready.catch(() => undefined)
  done.catch(() => undefined)
  const worker: Worker = { child, published: 0, ids: undefined, ready, done }
  child.on("message", (m: FromWorker) => {
    if (m.type === "ready") onReady()
    else if (m.type === "progress") worker.published = m.published
    else if (m.type === "done") {
      worker.ids = m.ids
      worker.published = m.ids.length
      onDone()
    } else if (m.type === "failed") onFail(new Error(`relay process p${index} failed: ${m.error}`))
  })
  child.on("exit", (code) => {
    if (worker.ids === undefined) onFail(new Error(`relay process p${index} exited with code ${code}`))
  })
  return worker
}

const tell = (w: Worker, m: ToWorker) => {
  if (w.child.connected) w.child.send(m)
}

/**
 * One drain of `msgs` (a fresh schema, seeded as the claim runs are) by `processes` relay processes
 * of `relays` pollers each, batch `batch`.
 */
export const run = (
  url: string,
  processes: number,
  relays: number,
  batch: number,
  msgs: ReadonlyArray<Message>
): Effect.Effect<ScaleRun> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, 2)
    return yield* Effect.gen(function*() {
      const { schema } = yield* Claim.prepare("clean", msgs)
      const workers = yield* Effect.acquireRelease(
        Effect.sync(() => Array.from({ length: processes }, (_, i) => spawn(url, schema, relays, batch, i))),
        (ws) => Effect.sync(() => ws.forEach((w) => w.child.exitCode === null && w.child.kill()))
      )
      yield* Effect.promise(() => Promise.all(workers.map((w) => w.ready)))
      const start = performance.now()
      for (const w of workers) tell(w, { type: "go" })
      // Each process reports its count after every publish; give up after 60 s without progress.
      let last = 0
      let lastChange = performance.now()
      while (true) {
        const total = workers.reduce((n, w) => n + w.published, 0)
        if (total >= msgs.length) break
        if (total !== last) {
          last = total
          lastChange = performance.now()
        } else if (performance.now() - lastChange > 60_000) {
          log(`  ! scale-out: stuck at ${total} of ${msgs.length} events`)
          break
        }
        yield* Effect.sleep("2 millis")
      }
      for (const w of workers) tell(w, { type: "stop" })
      yield* Effect.promise(() => Promise.all(workers.map((w) => w.done)))
      const seconds = (performance.now() - start) / 1000
      const seen = new Set<string>()
      let publishes = 0
      for (const w of workers) {
        for (const id of w.ids ?? []) seen.add(id)
        publishes += w.ids?.length ?? 0
      }
      const byStatus = yield* Claim.counts(schema)
      const published = byStatus.get("published") ?? 0
      const notPublished = [...byStatus].reduce((n, [status, count]) => n + (status === "published" ? 0 : count), 0)
      const lost = Math.max(msgs.length - seen.size, msgs.length - published) + notPublished
      return {
        processes,
        relaysPerProcess: relays,
        batch,
        events: seen.size,
        seconds: round(seconds, 3),
        eventsPerSecond: Math.round(seen.size / seconds),
        duplicates: publishes - seen.size,
        lost,
        perProcess: workers.map((w) => w.ids?.length ?? 0)
      } satisfies ScaleRun
    }).pipe(Effect.provideContext(context))
  }))
