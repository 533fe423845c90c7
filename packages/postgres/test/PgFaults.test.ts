/**
 * Connection faults against a client in a real child process (on the runtime the tests run on), so
 * that a driver failure ending the process is seen as an exit: backends terminated in a loop, and
 * PostgreSQL restarted under load. Every wait is for progress the child reports, not for a time.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Fiber, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import postgres from "postgres"
import { pgUrl } from "../../../test/support/pg.ts"
import { currentRuntime, exited, spawnOn, stopChild, waitForOutput } from "../../../test/support/processes.ts"
import { isRetryableSqlError, layer as pgLayer } from "../src/PgClient.ts"
import { startDedicatedPostgres } from "./support/dedicatedPostgres.ts"

const script = path.join(import.meta.dirname, "fixtures", "pgFaultClient.ts")

interface Counts {
  readonly ok: number
  readonly failed: number
  readonly heard: number
  readonly listenFailures: number
}
interface Done extends Counts {
  readonly unexpected: ReadonlyArray<string>
  readonly closeMillis: number
}

const sleep = (millis: number) => new Promise((resolve) => setTimeout(resolve, millis))

/** How long a child may report the same counts before the test calls it hung. */
const stallMillis = 120_000

/** A client process; `stop` asks it to shut down and returns its report. */
/** `url` without its `application_name` parameter. */
const withoutApplicationName = (url: string): string => {
  const parsed = new URL(url)
  parsed.searchParams.delete("application_name")
  return parsed.toString()
}

const startClient = async (url: string, name: string, env: Record<string, string> = {}) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-faults-"))
  const stopFile = path.join(dir, "stop")
  const child = spawnOn(currentRuntime(), script, [], {
    TIDINGS_TEST_PG_URL: url,
    APP: name,
    CHANNEL: name,
    STOP_FILE: stopFile,
    ...env
  })
  const exit = exited(child)
  const counts = (): Counts => {
    const lines = child.output().split("\n").filter((line) => line.startsWith("status "))
    return lines.length === 0
      ? { ok: 0, failed: 0, heard: 0, listenFailures: 0 }
      : JSON.parse(lines[lines.length - 1]!.slice(7))
  }
  const alive = () => {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(
        `the client process exited (${child.exitCode ?? child.signalCode}):\n${child.output().slice(-3000)}`
      )
    }
  }
  /**
   * Waits until the child reports `predicate`; fails at once if it exits, and when its counts stop
   * changing for 2 minutes (a hang, as opposed to a slow machine), with its output.
   */
  const until = async (predicate: (counts: Counts) => boolean, what = "progress", exiting = false) => {
    let last = JSON.stringify(counts())
    let since = Date.now()
    while (!predicate(counts())) {
      if (!exiting) alive()
      const now = JSON.stringify(counts())
      if (now !== last) {
        last = now
        since = Date.now()
      } else if (Date.now() - since > stallMillis) {
        throw new Error(
          `the client made no progress for 2 minutes waiting for ${what}:\n${child.output().slice(-3000)}`
        )
      }
      await sleep(50)
    }
  }
  const stop = async (): Promise<{ code: number | string; done: Done }> => {
    fs.writeFileSync(stopFile, "")
    await until(() => child.exitCode !== null || child.signalCode !== null, "its exit", true)
    const code = await exit
    const line = child.output().split("\n").find((l) => l.startsWith("done "))
    assert.isDefined(line, `no report from the client:\n${child.output().slice(-3000)}`)
    return { code, done: JSON.parse(line!.slice(5)) }
  }
  const cleanup = async () => {
    await stopChild(child)
    fs.rmSync(dir, { recursive: true, force: true })
  }
  // generous: starting a TypeScript process on a loaded machine takes a while; it reports when ready
  const ready = waitForOutput(child, "ready", 600_000)
  ready.catch(() => {})
  return { child, counts, alive, until, stop, cleanup, ready }
}

/** NOTIFYs `channel` until the client has heard one more than `heard`. */
const untilHeard = async (admin: postgres.Sql, client: Awaited<ReturnType<typeof startClient>>, channel: string) => {
  const heard = client.counts().heard
  await client.until((c) => {
    if (c.heard > heard) return true
    admin`SELECT pg_notify(${channel}, 'ping')`.catch(() => {})
    return false
  })
}

describe("PgClient under connection faults", () => {
  it.live(
    "backends terminated in a loop while the client connects and queries: no exit, queries resume",
    () =>
      Effect.promise(async () => {
        const name = `faults_${Math.random().toString(36).slice(2, 10)}`
        const admin = postgres(pgUrl(), { max: 1, fetch_types: false, onnotice: () => {} })
        // The client names its connections (APP): the URL must not name them otherwise (pgUrl() names
        // them after the test file, for the leak check), or the storm below would find none of them.
        const client = await startClient(withoutApplicationName(pgUrl()), name, { END_TIMEOUT_MS: "300000" })
        try {
          // The storm, from the moment the client starts connecting: every 100 ms, terminate every
          // backend of the client (pool, transactions, LISTEN), until 60 rounds found at least one and
          // the client did 100 units of work in between. (A connection lost while postgres.js fetched
          // its array types ended the process within seconds.)
          let rounds = 0
          let terminated = 0
          let workedFrom: number | undefined
          while (rounds < 60 || workedFrom === undefined || client.counts().ok < workedFrom + 100) {
            const [row] = await admin<Array<{ n: number }>>`
            SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = ${name}`
            if (row!.n > 0) rounds++
            terminated += row!.n
            if (workedFrom === undefined && client.child.output().includes("ready")) workedFrom = client.counts().ok
            client.alive()
            await sleep(100)
          }
          const afterStorm = client.counts()
          assert.isAbove(afterStorm.failed, 0, "the storm failed some work")
          // queries resume, and so does LISTEN
          await client.until((c) => c.ok >= afterStorm.ok + 50)
          await untilHeard(admin, client, name)
          const { code, done } = await client.stop()
          assert.strictEqual(code, 0, "the client exits normally")
          assert.deepStrictEqual(done.unexpected, [], "every failure was a retryable SqlError, every result right")
          assert.isAbove(terminated, 60)
          // endTimeout is 5 minutes: closing does not wait for it with nothing in flight
          assert.isBelow(done.closeMillis, 150_000)
        } finally {
          await client.cleanup()
          await admin.end()
        }
      }),
    900_000
  )

  it.live("PostgreSQL restarted under load: the client carries on", () =>
    Effect.promise(async () => {
      const server = await startDedicatedPostgres()
      const name = "restart"
      const admin = () => postgres(server.url, { max: 1, fetch_types: false, onnotice: () => {} })
      const client = await startClient(server.url, name, { END_TIMEOUT_MS: "300000" })
      try {
        await client.ready
        await client.until((c) => c.ok >= 20)
        const before = client.counts()
        await server.stop()
        await client.until((c) => c.failed > before.failed)
        await server.start()
        const restarted = client.counts()
        await client.until((c) => c.ok >= restarted.ok + 50)
        const sql = admin()
        await untilHeard(sql, client, name)
        await sql.end()
        const { code, done } = await client.stop()
        assert.strictEqual(code, 0)
        assert.deepStrictEqual(done.unexpected, [])
        assert.isBelow(done.closeMillis, 150_000, "endTimeout (5 minutes) is not waited for")
      } finally {
        await client.cleanup()
        await server.remove()
      }
    }), 900_000)
})

describe("closing the client", () => {
  it.live("a statement still running gets endTimeout, then its connection is closed", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(pgLayer({ url: pgUrl(), endTimeout: "200 millis" }), scope)
      const sql = Context.get(context, SqlClient.SqlClient)
      const name = `sleeper_${Math.random().toString(36).slice(2, 10)}`
      const sleeper = yield* Effect.forkDetach(Effect.exit(sql.unsafe(`SELECT pg_sleep(300) /* ${name} */`)))
      // wait until the server runs it
      while (
        (yield* sql<
          { n: number }
        >`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE ${`%${name}%`} AND pid <> pg_backend_pid()`)[
          0
        ]!.n === 0
      ) {
        yield* Effect.sleep("20 millis")
      }
      const started = Date.now()
      yield* Scope.close(scope, Exit.void)
      const closeMillis = Date.now() - started
      const exit = yield* Fiber.join(sleeper)
      assert.isTrue(Exit.isFailure(exit), "the running statement fails")
      const error = Cause.findErrorOption((exit as Exit.Failure<unknown, any>).cause)
      assert.isTrue(error._tag === "Some" && isRetryableSqlError(error.value), String(exit))
      // the 5 minutes of pg_sleep were not waited for
      assert.isBelow(closeMillis, 150_000)
      // The server runs pg_sleep on until it notices that its client is gone (when it would next
      // write): end it, so that the file leaves nothing running in the database.
      yield* Effect.promise(async () => {
        const admin = postgres(pgUrl(), { max: 1, fetch_types: false, onnotice: () => {} })
        try {
          await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE ${`%${name}%`} AND pid <> pg_backend_pid()`
        } finally {
          await admin.end()
        }
      })
    }), 900_000)

  it.live("closing after the server went away does not wait for endTimeout", () =>
    Effect.promise(async () => {
      const server = await startDedicatedPostgres()
      try {
        const closeMillis = await Effect.runPromise(Effect.gen(function*() {
          const scope = yield* Scope.make()
          const context = yield* Layer.buildWithScope(
            pgLayer({ url: server.url, maxConnections: 4, endTimeout: "300 seconds" }),
            scope
          )
          const sql = Context.get(context, SqlClient.SqlClient)
          yield* Effect.forEach([1, 2, 3, 4], () => sql.withTransaction(sql`SELECT pg_sleep(0.05)`), { concurrency: 4 })
          yield* Effect.promise(() => server.stop())
          const started = Date.now()
          yield* Scope.close(scope, Exit.void)
          return Date.now() - started
        }))
        assert.isBelow(closeMillis, 150_000, "endTimeout (5 minutes) is not waited for")
      } finally {
        await server.remove()
      }
    }), 900_000)
})
