/**
 * TLS, negotiated by the client's own sockets (see src/internal/pgSocket.ts), against a server of the
 * test's own with a certificate from fixtures/tls (a test CA; localhost and 127.0.0.1).
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Layer } from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import * as fs from "node:fs"
import * as path from "node:path"
import { pgUrl } from "../../../test/support/pg.ts"
import { layer as pgLayer } from "../src/PgClient.ts"
import { startDedicatedPostgres } from "./support/dedicatedPostgres.ts"

const tls = path.join(import.meta.dirname, "fixtures", "tls")
const read = (name: string) => fs.readFileSync(path.join(tls, name), "utf8")

/** Whether the session runs over TLS, through a client for `url`. */
const overTls = (url: string) =>
  Effect.scoped(Effect.gen(function*() {
    const sql = Context.get(yield* Layer.build(pgLayer({ url, maxConnections: 2 })), SqlClient.SqlClient)
    const [row] = yield* sql<{ ssl: boolean }>`SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`
    // transactions and parameters work as over plain TCP
    assert.deepStrictEqual([...yield* sql.withTransaction(sql<{ n: number }>`SELECT ${2}::int AS n`)], [{ n: 2 }])
    return row!.ssl
  }))

/** `url` with `sslmode` set (the test server's URL already has a query: its `application_name`). */
const withSslmode = (url: string, mode: string): string => {
  const parsed = new URL(url)
  parsed.searchParams.set("sslmode", mode)
  return parsed.toString()
}

const failure = (exit: Exit.Exit<unknown, unknown>): SqlError.SqlError => {
  assert.isTrue(Exit.isFailure(exit), "expected a failure")
  const error = Cause.findErrorOption((exit as Exit.Failure<unknown, unknown>).cause)
  assert.isTrue(error._tag === "Some", "a typed failure")
  return (error as { value: SqlError.SqlError }).value
}

describe("TLS", () => {
  it.live(
    "sslmode require, verify-ca, verify-full (by IP and by name), prefer and disable",
    () =>
      Effect.promise(async () => {
        const server = await startDedicatedPostgres({ tls: { cert: read("server.crt"), key: read("server.key") } })
        try {
          const url = (query: string, host = "127.0.0.1") => {
            const u = new URL(server.url)
            u.hostname = host
            return `${u.toString()}?${query}`
          }
          const ca = `sslrootcert=${encodeURIComponent(path.join(tls, "ca.crt"))}`
          const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(Effect.exit(effect))
          for (
            const [query, host, expected] of [
              ["sslmode=require", "127.0.0.1", true],
              [`sslmode=verify-ca&${ca}`, "127.0.0.1", true],
              [`sslmode=verify-full&${ca}`, "127.0.0.1", true],
              [`sslmode=verify-full&${ca}`, "localhost", true],
              ["sslmode=prefer", "127.0.0.1", true],
              ["sslmode=disable", "127.0.0.1", false],
              ["", "127.0.0.1", false]
            ] as const
          ) {
            const exit = await run(overTls(url(query, host)))
            assert.isTrue(Exit.isSuccess(exit), `${query} ${host}: ${String(exit)}`)
            assert.strictEqual((exit as Exit.Success<boolean>).value, expected, `${query} ${host}`)
          }
          // a certificate the client cannot verify is a connection failure, typed, not a crash
          const untrusted = failure(await run(overTls(url("sslmode=verify-full"))))
          assert.strictEqual(untrusted.reason._tag, "ConnectionError")
        } finally {
          await server.remove()
        }
      }),
    900_000
  )

  it.live(
    "a server without TLS: require fails with a retryable connection error, prefer falls back",
    () =>
      Effect.gen(function*() {
        const refused = failure(yield* Effect.exit(overTls(withSslmode(pgUrl(), "require"))))
        assert.strictEqual(refused.reason._tag, "ConnectionError")
        assert.match(refused.message, /SSL_REFUSED/)
        assert.isFalse(yield* overTls(withSslmode(pgUrl(), "prefer")))
      }),
    600_000
  )
})
