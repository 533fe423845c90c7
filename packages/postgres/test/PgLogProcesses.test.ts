/**
 * Log mode across real OS processes: relays that join, leave and are SIGKILLed; a relay SIGSTOPped
 * past its lease; consumers killed between their handler and the commit, once and in a loop.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { Deferred, Duration, Effect, Fiber, Schedule, Schema, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freshSchema, pgClientLayer, pgUrl } from "../../../test/support/pg.ts"
import { exited, spawnScript, stopChild } from "../../../test/support/processes.ts"
import * as PgLogStore from "../src/PgLogStore.ts"

const script = path.join(import.meta.dirname, "fixtures", "logProcess.ts")
const Tick = Event.define("log.tick", { aggregateType: "clock", schema: Schema.Struct({ n: Schema.Int }) })
/** A temporary folder for the children's output files, removed with the test's scope. */
const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tidings-log-"))),
  (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
)

type Child = ReturnType<typeof spawnScript>

/** Polls `check` every 50 ms until it holds; gives up (failing the test) after `limit`. */
const until = <E, R>(
  what: string,
  check: Effect.Effect<boolean, E, R>,
  limit: Duration.Input = "60 seconds",
  context: () => string = () => ""
) =>
  check.pipe(
    Effect.flatMap((ok) => (ok ? Effect.void : Effect.fail("not yet" as const))),
    Effect.retry(Schedule.spaced("50 millis")),
    Effect.timeoutOrElse({
      duration: limit,
      orElse: () => Effect.die(new Error(`timed out waiting for ${what}\n${context()}`))
    })
  )

/** The partitions a relay process said it holds last. */
const held = (child: Child): ReadonlyArray<number> => {
  const lines = child.output().split("\n").filter((l) => l.startsWith("partitions "))
  return lines.length === 0 ? [] : (JSON.parse(lines[lines.length - 1]!.slice("partitions ".length)) as Array<number>)
}

/** The relays hold every partition between them, each a part, none twice. */
const split = (children: ReadonlyArray<Child>, partitions: number) =>
  Effect.sync(() => {
    const parts = children.map(held)
    const all = parts.flat()
    return parts.every((p) => p.length > 0) && all.length === partitions && new Set(all).size === partitions
  })

/** Stops a child with SIGTERM; it must have shut down gracefully (Deno reports the signal as the exit status). */
const stopGracefully = (child: Child) =>
  Effect.map(Effect.promise(() => stopChild(child)), () => assert.include(child.output(), "stopped", child.output()))

const lines = (
  file: string
): Array<string> => (fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "") : [])

/** Starts the fixture; a child still running when the test's scope closes (a failed test) is killed. */
const spawn = (env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.sync(() => spawnScript(script, { TIDINGS_TEST_PG_URL: pgUrl(), LEASE_MS: "1500", ...env })),
    (child) =>
      Effect.sync(() =>
        void (child.exitCode === null && child.signalCode === null && process.kill(child.pid!, "SIGKILL"))
      )
  )

const relay = (schema: string, out: string, env: Record<string, string> = {}) =>
  spawn({ SCHEMA: schema, GROUP: "g", MODE: "relay", OUT: out, ...env })

const withLog = <A, E>(
  body: (schema: string, log: PgLogStore.Stores) => Effect.Effect<A, E, SqlClient.SqlClient | Scope.Scope>
) =>
  Effect.scoped(Effect.gen(function*() {
    const schema = yield* freshSchema("logmp")
    const stores = yield* PgLogStore.make({ schema, partitions: 8 })
    return yield* body(schema, stores)
  })).pipe(Effect.provide(pgClientLayer()))

const appendOne = (stores: PgLogStore.Stores, key: string, n: number) =>
  Effect.map(
    stores.outbox.withTransaction(Outbox.append(Tick, { aggregateId: key, payload: { n } })).pipe(
      Effect.provideService(OutboxStore, stores.outbox)
    ),
    (m) => m.id
  )

describe("log mode across processes", () => {
  it.live(
    "relay processes split the partitions and rebalance as they join, leave and are SIGKILLed; nothing is lost, only a killed process's batch goes twice",
    () =>
      withLog((schema, stores) =>
        Effect.gen(function*() {
          const d = yield* tempDir
          const out = { a: path.join(d, "a"), b: path.join(d, "b"), c: path.join(d, "c") }
          const appended: Array<string> = []
          const stop = yield* Deferred.make<void>()
          const producer = yield* Effect.forkChild(Effect.gen(function*() {
            for (let n = 0; !(yield* Deferred.isDone(stop)); n++) {
              appended.push(yield* appendOne(stores, `k${n % 20}`, n))
              yield* Effect.sleep("5 millis")
            }
          }))
          const a = yield* relay(schema, out.a)
          yield* until("a holds every partition", split([a], 8))
          const b = yield* relay(schema, out.b)
          yield* until("a and b split the partitions", split([a, b], 8))
          const c = yield* relay(schema, out.c)
          yield* until("a, b and c split the partitions", split([a, b, c], 8))
          yield* stopGracefully(c)
          yield* until("a and b take over c's partitions", split([a, b], 8))
          b.kill("SIGKILL")
          assert.strictEqual(yield* Effect.promise(() => exited(b)), "SIGKILL")
          yield* until("a takes over b's partitions", split([a], 8))
          yield* Deferred.succeed(stop, undefined)
          yield* Fiber.join(producer)
          yield* until(
            "everything published",
            Effect.sync(() => {
              const seen = new Set([...lines(out.a), ...lines(out.b), ...lines(out.c)])
              return appended.every((id) => seen.has(id))
            })
          )
          yield* stopGracefully(a)
          const all = [...lines(out.a), ...lines(out.b), ...lines(out.c)]
          const fromB = new Set(lines(out.b))
          const count = new Map<string, number>()
          for (const id of all) count.set(id, (count.get(id) ?? 0) + 1)
          const twice = [...count].filter(([, n]) => n > 1).map(([id]) => id)
          assert.isAbove(appended.length, 100)
          for (const id of twice) assert.isTrue(fromB.has(id), `${id} went twice, not from the killed process's batch`)
          assert.isTrue(lines(out.c).length > 0 && lines(out.b).length > 0, "every process published")
        })
      ),
    180_000
  )

  it.live(
    "a relay SIGSTOPped past its lease cannot move the cursor when it resumes; the new owner publishes its batch again",
    () =>
      withLog((schema, stores) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const d = yield* tempDir
          const ids: Array<string> = []
          for (let n = 0; n < 120; n++) ids.push(yield* appendOne(stores, `k${n % 6}`, n))
          // Its first publish takes longer than its timeout; a timed-out batch waits 30 s for its retry,
          // so a slow test cannot let it publish anything before it is stopped.
          const a = yield* relay(schema, path.join(d, "a"), {
            PUBLISH_DELAY_MS: "2500",
            PUBLISH_TIMEOUT_MS: "1400",
            RETRY_MS: "30000"
          })
          yield* until("a holds every partition", split([a], 8))
          // Stop it right after a publish started: it holds a batch in flight.
          yield* until("a publishes", Effect.sync(() => a.output().includes("publishing")))
          // process.kill, not child.kill: Deno's child.kill sends no second signal to a child (SIGCONT).
          process.kill(a.pid!, "SIGSTOP")
          const behind = yield* sql<{ id: string }>`SELECT l.id FROM ${sql(`${schema}.log`)} l
          JOIN ${sql(`${schema}.log_cursor`)} c ON c.group_name = 'g' AND c.partition = l.partition
          WHERE (l.tx_id, l.seq) > (c.tx_id, c.seq)`
          assert.isAbove(behind.length, 0, "a holds a batch in flight")
          const b = yield* relay(schema, path.join(d, "b"))
          yield* until(
            "b publishes everything a held",
            Effect.sync(() => {
              const seen = new Set(lines(path.join(d, "b")))
              return behind.every((r) => seen.has(r.id))
            })
          )
          yield* until(
            "b settled it",
            Effect.map(stores.log.groups, (gs) => gs.find((g) => g.group === "g")?.lag === 0)
          )
          const cursors = () =>
            sql<{ partition: number; pos: string }>`SELECT partition, tx_id::text || '/' || seq AS pos FROM ${
              sql(`${schema}.log_cursor`)
            } WHERE group_name = 'g' ORDER BY partition`
          const before = yield* cursors()
          process.kill(a.pid!, "SIGCONT")
          yield* until(
            "a's settle is refused by the fence",
            Effect.sync(() => a.output().includes("fenced")),
            "60 seconds",
            () => a.output()
          )
          assert.deepStrictEqual(yield* cursors(), before, "the cursors are where b left them")
          yield* until("a and b share the partitions again", split([a, b], 8))
          yield* appendOne(stores, "k0", 999).pipe(Effect.tap((id) => Effect.sync(() => ids.push(id))))
          yield* until(
            "later events",
            Effect.sync(() => new Set([...lines(path.join(d, "a")), ...lines(path.join(d, "b"))]).size === ids.length),
            "60 seconds",
            () =>
              `a:\n${a.output()}\nb:\n${b.output()}\npublished ${
                new Set([...lines(path.join(d, "a")), ...lines(path.join(d, "b"))]).size
              } of ${ids.length}`
          )
          yield* Effect.all([stopGracefully(a), stopGracefully(b)], { concurrency: 2 })
          const left = yield* Effect.map(stores.log.groups, (gs) => gs.find((g) => g.group === "g")?.lag)
          assert.strictEqual(left, 0, "nothing skipped")
        })
      ),
    180_000
  )

  const consumer = (schema: string, out: string, env: Record<string, string>) =>
    spawn({ SCHEMA: schema, GROUP: "c", MODE: "consumer", OUT: out, ...env })
  const effects = (schema: string) =>
    SqlClient.SqlClient.use((sql) =>
      sql<{ n: number; copies: number }>`SELECT n, count(*)::int AS copies FROM ${
        sql(`${schema}.effects`)
      } GROUP BY n ORDER BY n`
    )
  const lag = (stores: PgLogStore.Stores) =>
    Effect.map(stores.log.groups, (gs) => gs.find((g) => g.group === "c")?.lag ?? -1)

  it.live(
    "PgLogConsumer: a process killed between its handler and the commit leaves no effect behind; the next owner's takes effect once",
    () =>
      withLog((schema, stores) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE ${
            sql(`${schema}.effects`)
          } (event_id text NOT NULL, n int NOT NULL, pid int NOT NULL)`
          for (let n = 0; n < 30; n++) yield* appendOne(stores, `k${n % 5}`, n)
          const d = yield* tempDir
          const x = yield* consumer(schema, path.join(d, "x"), { KILL_AT: "12", ONCE: "1" })
          assert.strictEqual(yield* Effect.promise(() => exited(x)), "SIGKILL", x.output())
          const y = yield* consumer(schema, path.join(d, "x"), { KILL_AT: "12", ONCE: "1" })
          yield* until("every event handled", Effect.map(lag(stores), (n) => n === 0))
          yield* stopGracefully(y)
          const rows = yield* effects(schema)
          assert.deepStrictEqual(
            rows.map((r) => [r.n, r.copies]),
            Array.from({ length: 30 }, (_, n) => [n, 1]),
            "each effect exactly once"
          )
        })
      ),
    120_000
  )

  it.live(
    "PgLogConsumer crash loop: an event that kills the consumer maxCrashes times is dead-lettered; every other event takes effect once",
    () =>
      withLog((schema, stores) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE ${
            sql(`${schema}.effects`)
          } (event_id text NOT NULL, n int NOT NULL, pid int NOT NULL)`
          for (let n = 0; n < 20; n++) yield* appendOne(stores, `k${n % 4}`, n)
          const d = yield* tempDir
          let deaths = 0
          while ((yield* lag(stores)) !== 0) {
            const p = yield* consumer(schema, path.join(d, "p"), { KILL_AT: "7", MAX_CRASHES: "3" })
            const done = yield* Effect.raceFirst(
              Effect.map(Effect.promise(() => exited(p)), (code) => ({ code })),
              Effect.as(until("the log handled", Effect.map(lag(stores), (n) => n === 0), "120 seconds"), {
                code: undefined
              })
            )
            if (done.code === "SIGKILL") deaths++
            else yield* stopGracefully(p)
            assert.isAtMost(deaths, 3, "no more crashes than maxCrashes")
          }
          assert.strictEqual(deaths, 3)
          const rows = yield* effects(schema)
          assert.deepStrictEqual(
            rows.map((r) => [r.n, r.copies]),
            Array.from({ length: 20 }, (_, n) => [n, 1]).filter(([n]) => n !== 7)
          )
          const failed = yield* stores.outbox.listFailed({ limit: 10 })
          assert.deepStrictEqual(failed.map((f) => (f.message.payload as { n: number }).n), [7])
          assert.match(failed[0]!.lastError ?? "", /crash loop: 3/)
        })
      ),
    180_000
  )
})
