/**
 * Building `PgClient.layer` while the server cannot be reached: its first query is retried until
 * `startupTimeout` (a backend terminated under it, a server that is not up yet), while a refusal
 * (bad password, unknown database) fails at once.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Layer, Logger, References } from "effect"
import { SqlClient, SqlError } from "effect/sql"
import * as net from "node:net"
import postgres from "postgres"
import { pgUrl } from "../../../test/support/pg.ts"
import { isRetryableSqlError, layer as pgLayer, type PgClientConfig } from "../src/PgClient.ts"

/** `url` without its `application_name` parameter (the client names its connections). */
const withoutApplicationName = (url: string): string => {
  const parsed = new URL(url)
  parsed.searchParams.delete("application_name")
  return parsed.toString()
}

const unique = (prefix: string) => `${prefix}_${Math.random().toString(36).slice(2, 10)}`

/** Every log line, as JSON text, into `lines`. */
const logTo = (lines: Array<string>) =>
  Layer.mergeAll(
    Logger.layer([Logger.map(Logger.formatJson, (line) => void lines.push(line))]),
    Layer.succeed(References.MinimumLogLevel, "All")
  )

/** Builds the layer, runs `SELECT 1` on it and releases it; with every log line kept in `lines`. */
const buildAndQuery = (config: PgClientConfig, lines: Array<string>) =>
  Effect.exit(
    Effect.scoped(Effect.flatMap(Layer.build(pgLayer(config)), (context) =>
      Effect.provideContext(
        SqlClient.SqlClient.use((sql) => sql<{ one: number }>`SELECT 1 AS one`),
        context
      )))
  ).pipe(
    Effect.provide(logTo(lines))
  )

/** Builds the layer and releases it at once. */
const buildOnly = (config: PgClientConfig, lines: Array<string>) =>
  Effect.exit(Effect.scoped(Layer.build(pgLayer(config)))).pipe(Effect.provide(logTo(lines)))

const retries = (lines: ReadonlyArray<string>) => lines.filter((l) => l.includes("start-up attempt")).length

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error("expected a failure")
  const error = Cause.findErrorOption(exit.cause)
  if (error._tag === "None") throw new Error(`expected a typed failure, got ${Cause.pretty(exit.cause)}`)
  return error.value
}

/** A TCP proxy to `target` on a port that refuses connections until `open()` is called. */
const lateProxy = async (target: URL) => {
  const port = await new Promise<number>((resolve) => {
    const probe = net.createServer().listen(0, "127.0.0.1", () => {
      const address = probe.address()
      probe.close(() => resolve(typeof address === "object" && address !== null ? address.port : 1))
    })
  })
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname)
    for (const s of [client, upstream]) {
      sockets.add(s)
      s.on("error", () => {
        client.destroy()
        upstream.destroy()
      })
      s.on("close", () => sockets.delete(s))
    }
    client.pipe(upstream).pipe(client)
  })
  return {
    port,
    open: () => new Promise<void>((resolve) => server.listen(port, "127.0.0.1", () => resolve())),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      })
  }
}

describe("PgClient start-up", () => {
  it.live("backends terminated in a loop while the layer is built: every build succeeds", () =>
    Effect.gen(function*() {
      const name = unique("startup")
      const url = withoutApplicationName(pgUrl())
      const admin = postgres(pgUrl(), { max: 1, fetch_types: false, onnotice: () => {} })
      let terminated = 0
      let building = true
      // The storm: every few milliseconds, terminate every backend of the client being built.
      const storm = (async () => {
        while (building) {
          const [row] = await admin<Array<{ n: number }>>`
            SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = ${name}`
          terminated += row!.n
          await new Promise((resolve) => setTimeout(resolve, 2))
        }
      })()
      const lines: Array<string> = []
      let builds = 0
      try {
        // Build until the storm has hit the first query of a build several times (the terminated
        // backend of a build's first query failed the layer, and the process, before the fix).
        while (retries(lines) < 5) {
          const exit = yield* buildOnly({ url, applicationName: name, startupTimeout: "5 minutes" }, lines)
          builds++
          assert.isTrue(Exit.isSuccess(exit), Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "")
        }
      } finally {
        building = false
        yield* Effect.promise(() => storm.then(() => admin.end()))
      }
      assert.isAtLeast(terminated, 5)
      assert.isAtLeast(builds, 1)
    }), 600_000)

  it.live("a server that comes up during start-up: the layer waits for it and builds", () =>
    Effect.gen(function*() {
      const target = new URL(withoutApplicationName(pgUrl()))
      const proxy = yield* Effect.promise(() => lateProxy(target))
      const url = new URL(target)
      url.hostname = "127.0.0.1"
      url.port = String(proxy.port)
      const lines: Array<string> = []
      const fiber = yield* Effect.forkChild(buildAndQuery({ url: url.toString(), startupTimeout: "5 minutes" }, lines))
      // refused twice (ECONNREFUSED), then the server "starts"
      while (retries(lines) < 2) yield* Effect.sleep("20 millis")
      yield* Effect.promise(() => proxy.open())
      const exit = yield* Fiber.join(fiber)
      yield* Effect.promise(() => proxy.close())
      assert.isTrue(Exit.isSuccess(exit), Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "")
      assert.include(lines.join("\n"), "ECONNREFUSED")
    }), 120_000)

  it.live("a wrong password or an unknown database fails at once, with no retry", () =>
    Effect.gen(function*() {
      const base = new URL(withoutApplicationName(pgUrl()))
      const badPassword = new URL(base)
      badPassword.password = "Wr0ng-Pa55word-x"
      const lines: Array<string> = []
      const auth = failureOf(
        yield* buildAndQuery({ url: badPassword.toString(), startupTimeout: "5 minutes" }, lines)
      ) as SqlError.SqlError
      assert.strictEqual(auth.reason._tag, "AuthenticationError")
      assert.isFalse(isRetryableSqlError(auth))
      const unknownDb = new URL(base)
      unknownDb.pathname = `/${unique("no_such_db")}`
      const missing = failureOf(
        yield* buildAndQuery({ url: unknownDb.toString(), startupTimeout: "5 minutes" }, lines)
      ) as SqlError.SqlError
      assert.strictEqual((missing.reason.cause as { code?: string }).code, "3D000")
      assert.isFalse(isRetryableSqlError(missing))
      assert.strictEqual(retries(lines), 0, lines.join("\n"))
    }), 120_000)

  it.live(
    "startupTimeout is honoured: an unreachable server is retried until it, then a retryable error",
    () =>
      Effect.gen(function*() {
        const proxy = yield* Effect.promise(() => lateProxy(new URL(pgUrl())))
        const lines: Array<string> = []
        const started = Date.now()
        const exit = yield* buildAndQuery({
          url: `postgres://u:p@127.0.0.1:${proxy.port}/db`,
          startupTimeout: "1500 millis"
        }, lines)
        const elapsed = Date.now() - started
        const error = failureOf(exit) as SqlError.SqlError
        assert.strictEqual(error.reason._tag, "ConnectionError")
        assert.isTrue(isRetryableSqlError(error))
        assert.isAtLeast(elapsed, 1450, `gave up after ${elapsed} ms`)
        assert.isAtLeast(retries(lines), 3)
      }),
    120_000
  )
})
