/**
 * `pnpm bench publish --transport webhooks`: outbox → webhooks throughput, beside a plain fetch loop.
 *
 * - `tidings`: pending events pre-inserted in a fresh outbox, then `Relay.layer` (`relays` pollers,
 *   `batch` events per claim) publishing through `WebhookPublisher` (one endpoint, `concurrency`
 *   requests in flight) into a local receiver: claim, sign, POST, settle. The clock runs from starting
 *   the relay until every event was answered 2xx.
 * - `fetch`: the same requests (the same body and signature headers, each signed with WebCrypto as
 *   it is sent) from `concurrency` plain `fetch` loops, no database; and `fetch-unsigned`, the same
 *   loops without the signature. The better of the two is the ceiling the relay is compared with.
 *
 * The receiver is a process of its own (`lib/webhookSink.ts`) answering 204 at once. Every run checks
 * that it saw each event exactly once and that the outbox has every event published.
 * @module
 */
import type { Message } from "@tidings/core/Message"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as Wakeup from "@tidings/core/Wakeup"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { WebhookPublisher, WebhookSignature } from "@tidings/webhooks"
import { Effect, Layer, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import { spawn } from "node:child_process"
import * as os from "node:os"
import * as path from "node:path"
import type { Reader } from "./lib/cli.ts"
import * as Pg from "./lib/postgres.ts"
import { counting, Tally } from "./lib/publishers.ts"
import { int, log, secs, table } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { round } from "./lib/stats.ts"

/** One comparison's settings. */
export interface Setting {
  readonly relays: number
  readonly batch: number
  /** Requests in flight to the endpoint (the publisher's endpoint concurrency, and the fetch loops). */
  readonly concurrency: number
}

/** Settings of `bench publish --transport webhooks`. */
export interface Options {
  readonly transport: "webhooks"
  readonly quick: boolean
  readonly events: number
  readonly settings: ReadonlyArray<Setting>
  readonly rounds: number
}

const tuned: Setting = { relays: 4, batch: 100, concurrency: 64 }

/** Reads the flags: `--quick`, `--events`, `--relays`, `--batch`, `--concurrency`, `--rounds`. */
export const options = (args: Reader): Options => {
  const quick = args.bool("quick")
  const settings: Array<Setting> = []
  for (const relays of args.integers("relays") ?? [tuned.relays]) {
    for (const batch of args.integers("batch") ?? [tuned.batch]) {
      for (const concurrency of args.integers("concurrency") ?? [tuned.concurrency]) {
        settings.push({ relays, batch, concurrency })
      }
    }
  }
  return {
    transport: "webhooks",
    quick,
    events: Math.round(args.number("events") ?? (quick ? 5_000 : 20_000)),
    settings,
    rounds: args.integers("rounds")?.[0] ?? (quick ? 1 : 3)
  }
}

/** One measured drain. */
interface Drain {
  readonly perSecond: number
  readonly seconds: number
  /** CPU time of this (the sending) process per event, in µs: less sensitive to other load than the rate. */
  readonly cpuMicros: number
  readonly lost: number
  readonly duplicates: number
}

/** One tidings-vs-fetch comparison. */
export interface Run extends Setting {
  readonly tidingsPerSecond: number
  readonly fetchPerSecond: number
  readonly fetchUnsignedPerSecond: number
  /** tidings / the better fetch loop. */
  readonly ratio: number
  /** CPU µs per event of the sending process (the best run of each): the relay, and the signed fetch loop. */
  readonly tidingsCpuMicros: number
  readonly fetchCpuMicros: number
  readonly lost: number
  readonly duplicates: number
}

/** The JSON output. */
export interface Result {
  readonly publishWebhooks: { readonly best: Run | null; readonly events: number }
  readonly runs: ReadonlyArray<Run>
  readonly meta: Record<string, unknown>
}

interface Sink {
  readonly url: string
  readonly reset: Effect.Effect<void>
  readonly stats: Effect.Effect<{ readonly received: number; readonly distinct: number }>
}

/** Starts the receiver process for the scope. */
const sink: Effect.Effect<Sink, never, Scope.Scope> = Effect.acquireRelease(
  Effect.promise(() =>
    new Promise<{ port: number; child: ReturnType<typeof spawn> }>((resolve, reject) => {
      const child = spawn(process.execPath, [path.join(import.meta.dirname, "lib/webhookSink.ts")], {
        stdio: ["ignore", "pipe", "inherit"]
      })
      child.once("exit", (code) => reject(new Error(`the webhook sink exited (${code})`)))
      child.stdout!.on("data", (d: Buffer) => {
        const m = /listening (\d+)/.exec(d.toString())
        if (m !== null) resolve({ port: Number(m[1]), child })
      })
    })
  ),
  ({ child }) => Effect.sync(() => void child.kill("SIGTERM"))
).pipe(Effect.map(({ port }) => {
  const base = `http://127.0.0.1:${port}`
  return {
    url: `${base}/hooks`,
    reset: Effect.promise(() => fetch(`${base}/reset`, { method: "POST" }).then((r) => r.arrayBuffer())).pipe(
      Effect.asVoid
    ),
    stats: Effect.promise(() =>
      fetch(`${base}/stats`).then((r) => r.json() as Promise<{ received: number; distinct: number }>)
    )
  }
}))

const check = (label: string, events: number, got: { readonly received: number; readonly distinct: number }) => {
  const result = { lost: events - got.distinct, duplicates: got.received - got.distinct }
  if (result.lost !== 0 || result.duplicates !== 0) {
    log(
      `  ! ${label}: ${int(events)} events, the receiver saw ${int(got.received)} requests (${
        int(got.distinct)
      } distinct)`
    )
    process.exitCode = 1
  }
  return result
}

/** The relay drains `msgs`, pre-inserted as pending events, into the receiver. */
const tidings = (
  pgUrl: string,
  receiver: Sink,
  secret: string,
  setting: Setting,
  msgs: ReadonlyArray<Message>
): Effect.Effect<Drain> =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(pgUrl, setting.relays + 2)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("webhooks")
      const store = yield* PgOutboxStore.make({ schema }).pipe(Effect.orDie)
      yield* Pg.checkpoint
      yield* Seed.insertPending(store, msgs)
      yield* Pg.analyze(schema)
      yield* receiver.reset
      const webhooks = yield* WebhookPublisher.make({
        endpoints: [{ url: receiver.url, secret, concurrency: setting.concurrency }]
      }).pipe(Effect.orDie)
      const tally = new Tally()
      const cpu = process.cpuUsage()
      const seconds = yield* Effect.scoped(Effect.gen(function*() {
        const start = performance.now()
        yield* Layer.build(
          Relay.layer({
            name: "bench",
            concurrency: setting.relays,
            batchSize: setting.batch,
            statsInterval: false,
            retention: false
          }).pipe(
            Layer.provide(Layer.mergeAll(
              Layer.succeed(OutboxStore)(store),
              Layer.succeed(Publisher)(counting(webhooks, tally)),
              Layer.succeed(Wakeup.Wakeups)(Wakeup.makeHub())
            ))
          )
        ).pipe(Effect.orDie)
        yield* tally.reached(msgs.length)
        return (performance.now() - start) / 1000
      }))
      const rows = yield* SqlClient.SqlClient.use((sql) =>
        sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.outbox`)} WHERE status = 'published'`
      ).pipe(Effect.orDie)
      if (rows[0]!.n !== msgs.length) {
        log(`  ! tidings: ${int(msgs.length)} events but ${int(rows[0]!.n)} published in the outbox`)
        process.exitCode = 1
      }
      const used = process.cpuUsage(cpu)
      return {
        perSecond: Math.round(msgs.length / seconds),
        seconds,
        cpuMicros: Math.round((used.user + used.system) / msgs.length),
        ...check("tidings", msgs.length, yield* receiver.stats)
      }
    }).pipe(Effect.provideContext(context))
  }))

/** `concurrency` plain fetch loops send the same requests (signed or not) to the receiver. */
const fetchLoop = (
  receiver: Sink,
  secret: string,
  setting: Setting,
  msgs: ReadonlyArray<Message>,
  signed: boolean
): Effect.Effect<Drain> =>
  Effect.gen(function*() {
    yield* receiver.reset
    const cpu = process.cpuUsage()
    const seconds = yield* Effect.promise(async () => {
      const bytes = WebhookSignature.fromBase64(secret.slice("whsec_".length))!
      const key = await crypto.subtle.importKey(
        "raw",
        bytes as Uint8Array<ArrayBuffer>,
        { name: "HMAC", hash: "SHA-256" },
        false,
        ["sign"]
      )
      const encoder = new TextEncoder()
      let next = 0
      const start = performance.now()
      const loop = async () => {
        while (next < msgs.length) {
          const m = msgs[next++]!
          const body = WebhookPublisher.defaultBody(m)
          const timestamp = Math.floor(Date.now() / 1000)
          const headers: Record<string, string> = {
            "content-type": "application/json",
            "webhook-id": m.id,
            "webhook-timestamp": String(timestamp)
          }
          if (signed) {
            const signature = await crypto.subtle.sign("HMAC", key, encoder.encode(`${m.id}.${timestamp}.${body}`))
            headers["webhook-signature"] = `v1,${WebhookSignature.toBase64(new Uint8Array(signature))}`
          }
          const response = await fetch(receiver.url, { method: "POST", headers, body })
          await response.arrayBuffer()
          if (response.status !== 204) throw new Error(`the receiver answered ${response.status}`)
        }
      }
      await Promise.all(Array.from({ length: setting.concurrency }, loop))
      return (performance.now() - start) / 1000
    })
    const used = process.cpuUsage(cpu)
    return {
      perSecond: Math.round(msgs.length / seconds),
      seconds,
      cpuMicros: Math.round((used.user + used.system) / msgs.length),
      ...check(signed ? "fetch" : "fetch-unsigned", msgs.length, yield* receiver.stats)
    }
  })

const describe = (s: Setting) => `relays=${s.relays} batch=${s.batch} concurrency=${s.concurrency}`

/** Runs the comparison against a fresh durable PostgreSQL and a receiver process. */
export const run = (opts: Options): Effect.Effect<Result, never, Scope.Scope> =>
  Effect.gen(function*() {
    const server = yield* Pg.server
    const receiver = yield* sink
    const secret = WebhookSignature.generateSecret()
    const started = performance.now()
    const loadBefore = os.loadavg()[0]!
    log(
      `publish --transport webhooks: ${
        int(opts.events)
      } events per run, ${opts.settings.length} setting(s) × ${opts.rounds} round(s) of tidings + fetch loops`
    )
    const msgs = yield* Seed.messages(opts.events)
    // Warm-up (not reported): JIT, connections, the server's first tables.
    const warm = msgs.slice(0, Math.min(2_000, msgs.length))
    yield* tidings(server.url, receiver, secret, opts.settings[0]!, warm)
    yield* fetchLoop(receiver, secret, opts.settings[0]!, warm, true)

    const runs: Array<Run> = []
    for (const setting of opts.settings) {
      const t: Array<Drain> = []
      const f: Array<Drain> = []
      const u: Array<Drain> = []
      // Alternating rounds, so that drift hits all alike; best of each.
      for (let i = 0; i < opts.rounds; i++) {
        t.push(yield* tidings(server.url, receiver, secret, setting, msgs))
        f.push(yield* fetchLoop(receiver, secret, setting, msgs, true))
        u.push(yield* fetchLoop(receiver, secret, setting, msgs, false))
        log(
          `  ${describe(setting)}  tidings ${int(t.at(-1)!.perSecond)}/s (${t.at(-1)!.cpuMicros} µs CPU/event)  fetch ${
            int(f.at(-1)!.perSecond)
          }/s (${f.at(-1)!.cpuMicros} µs)  fetch unsigned ${int(u.at(-1)!.perSecond)}/s`
        )
      }
      const best = (xs: ReadonlyArray<Drain>) => xs.reduce((x, y) => (y.perSecond > x.perSecond ? y : x))
      const ceiling = Math.max(best(f).perSecond, best(u).perSecond)
      runs.push({
        ...setting,
        tidingsPerSecond: best(t).perSecond,
        fetchPerSecond: best(f).perSecond,
        fetchUnsignedPerSecond: best(u).perSecond,
        ratio: round(best(t).perSecond / ceiling, 3),
        tidingsCpuMicros: best(t).cpuMicros,
        fetchCpuMicros: best(f).cpuMicros,
        lost: [...t, ...f, ...u].reduce((n, x) => n + x.lost, 0),
        duplicates: [...t, ...f, ...u].reduce((n, x) => n + x.duplicates, 0)
      })
    }
    log("")
    log(
      `outbox → webhooks (one local endpoint answering 204), ${
        int(opts.events)
      } events per run, best of ${opts.rounds} (PostgreSQL ${server.version}, fsync=${server.fsync})`
    )
    table(
      [
        "relays",
        "batch",
        "concurrency",
        "tidings/s",
        "fetch/s",
        "fetch unsigned/s",
        "ratio",
        "CPU µs/event tidings",
        "fetch",
        "lost",
        "dup"
      ],
      runs.map((r) => [
        String(r.relays),
        String(r.batch),
        String(r.concurrency),
        int(r.tidingsPerSecond),
        int(r.fetchPerSecond),
        int(r.fetchUnsignedPerSecond),
        `${Math.round(r.ratio * 100)}%`,
        String(r.tidingsCpuMicros),
        String(r.fetchCpuMicros),
        String(r.lost),
        String(r.duplicates)
      ])
    )
    log(
      `total ${secs((performance.now() - started) / 1000)} s; load average ${loadBefore.toFixed(1)} before, ${
        os.loadavg()[0]!.toFixed(1)
      } after (${os.cpus().length} cores)`
    )
    return {
      publishWebhooks: {
        best: runs.length === 0 ? null : runs.reduce((a, b) => (b.tidingsPerSecond > a.tidingsPerSecond ? b : a)),
        events: opts.events
      },
      runs,
      meta: {
        events: opts.events,
        rounds: opts.rounds,
        quick: opts.quick,
        postgres: server.version,
        fsync: server.fsync,
        node: process.version,
        loadAverage: [round(loadBefore, 2), round(os.loadavg()[0]!, 2)],
        cpus: os.cpus().length
      }
    }
  })
