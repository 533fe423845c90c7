/**
 * A PostgreSQL server of a test's own, which the test may stop and start again (a restart keeps
 * the data and the port), unlike the shared server of the global setup. On 127.0.0.1, a free port,
 * in a temporary folder removed by `remove`.
 */
import type { ChildProcess } from "node:child_process"
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import {
  embeddedBinDir,
  freePort,
  initCluster,
  reachableBinDir,
  serverOptions,
  serverUser,
  spawnServer
} from "../../../../test/support/embeddedPostgres.ts"

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
  // As root, initdb and the server run as the `postgres` OS user, from a copy of the binaries that
  // user can reach (a clone in a private folder keeps them out of its reach): the shared server's way.
  const user = serverUser()
  const binDir = await reachableBinDir(embeddedBinDir(), user)
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "tidings-pg-dedicated-"))
  await fs.chmod(dir, 0o777)
  const data = path.join(dir, "data")
  const port = await freePort()
  const flags = [
    "-D",
    data,
    ...serverOptions(port, dir, [
      ["fsync", "off"],
      ["synchronous_commit", "off"],
      ...(options.tls === undefined ? [] : [
        ["ssl", "on"],
        ["ssl_cert_file", path.join(dir, "server.crt")],
        ["ssl_key_file", path.join(dir, "server.key")]
      ] as const)
    ])
  ]
  let child: ChildProcess | undefined
  const alive = (c: ChildProcess | undefined): c is ChildProcess =>
    c !== undefined && c.exitCode === null && c.signalCode === null
  // If the test process exits without removing it, the server goes too (immediate shutdown).
  const killNow = () => void (alive(child) && child.kill("SIGQUIT"))
  process.once("exit", killNow)
  const stop = async () => {
    const c = child
    child = undefined
    if (!alive(c)) return
    const exited = new Promise<void>((resolve) => c.once("exit", () => resolve()))
    c.kill("SIGINT") // fast shutdown: sessions are terminated
    await exited
  }
  const start = async () => {
    if (alive(child)) return
    const server = spawnServer(binDir, flags, user, dir)
    child = server.child
    await server.ready
  }
  let removed = false
  const remove = async () => {
    if (removed) return
    removed = true
    await stop().catch(() => {})
    process.removeListener("exit", killNow)
    await fs.rm(dir, { recursive: true, force: true }).catch(() => {})
  }
  try {
    await initCluster(binDir, dir, data, user)
    if (options.tls !== undefined) {
      // The server reads the key as the user it runs as, mode 0600.
      for (const [name, text] of [["server.crt", options.tls.cert], ["server.key", options.tls.key]] as const) {
        const file = path.join(dir, name)
        await fs.writeFile(file, text, { mode: 0o600 })
        if (user !== undefined) await fs.chown(file, user.uid, user.gid)
      }
    }
    await start()
  } catch (error) {
    await remove()
    throw new Error(`PostgreSQL (${binDir}) failed to start: ${error instanceof Error ? error.message : String(error)}`)
  }
  return { url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`, stop, start, remove }
}
