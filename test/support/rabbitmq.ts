/**
 * A real RabbitMQ broker for tests and benchmarks: the broker at `TIDINGS_AMQP_URL` when set, otherwise
 * a private node of Debian's `rabbitmq-server` (installed with apt when missing and we run as root)
 * with its own node name, data directory, epmd and free ports on 127.0.0.1, stopped by `stop()`.
 * As root the node runs as the `rabbitmq` user (as Debian's wrappers do); as anyone else it runs as
 * that user, with a private home for its Erlang cookie, through the scripts the wrappers call.
 *
 * Fault helpers (`closeAllConnections`, `stopApp`, `startApp`) drive the node with `rabbitmqctl`; they
 * need a node started here (or `TIDINGS_RABBITMQ_NODE` + `TIDINGS_RABBITMQ_EPMD_PORT` next to
 * `TIDINGS_AMQP_URL` for a local broker started elsewhere).
 * @module
 */
import { type ChildProcess, execFile, spawn, spawnSync } from "node:child_process"
import { rmSync } from "node:fs"
import * as fs from "node:fs/promises"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "./embeddedPostgres.ts"

/** Control of a node through `rabbitmqctl`. */
export interface RabbitControl {
  readonly node: string
  readonly epmdPort: number
  /** `rabbitmqctl close_all_connections`: every client sees its connection dropped by the broker. */
  readonly closeAllConnections: (reason?: string) => Promise<void>
  /** `rabbitmqctl stop_app`: the broker application stops (connections drop, ports close); the VM stays. */
  readonly stopApp: () => Promise<void>
  /** `rabbitmqctl start_app` and wait until it accepts connections again. */
  readonly startApp: () => Promise<void>
  /** Runs any `rabbitmqctl` command against the node; resolves with stdout. */
  readonly ctl: (args: ReadonlyArray<string>, timeoutMs?: number) => Promise<string>
}

/** A running broker; `stop` is idempotent and a no-op for an external broker. */
export interface RunningRabbit {
  readonly url: string
  readonly external: boolean
  /** Undefined for an external broker without `TIDINGS_RABBITMQ_NODE`. */
  readonly control: RabbitControl | undefined
  /** Milliseconds spent installing `rabbitmq-server` (0 when it was there) and starting the node. */
  readonly timings: { readonly installMs: number; readonly startMs: number }
  readonly stop: () => Promise<void>
}

/** Options for {@link startRabbit}. */
export interface StartOptions {
  /** Ignore `TIDINGS_AMQP_URL` and always start a private node (fault tests that restart the broker). */
  readonly private?: boolean
  /** Prefix of the node name (default `tidings`). */
  readonly name?: string
  readonly onLog?: (line: string) => void
}

const SERVER = "/usr/sbin/rabbitmq-server"
const SERVER_SCRIPT = "/usr/lib/rabbitmq/bin/rabbitmq-server"
const CTL = "/usr/sbin/rabbitmqctl"
// What the Debian wrappers run once they have switched users: usable by anyone as themselves.
const CTL_SCRIPT = "/usr/lib/rabbitmq/bin/rabbitmqctl"
// The rabbitmq user's home: its .erlang.cookie is what rabbitmqctl (run as rabbitmq) presents.
const RABBIT_HOME = "/var/lib/rabbitmq"

const isRoot = () => typeof process.getuid === "function" && process.getuid() === 0

const exists = (file: string) => fs.access(file).then(() => true, () => false)

/** Installs Debian's rabbitmq-server when missing (root only); throws with the reason otherwise. */
const ensureInstalled = async (): Promise<number> => {
  if (await exists(SERVER) && await exists(CTL)) return 0
  if (!isRoot()) {
    throw new Error(
      "rabbitmq-server is not installed and the tests do not run as root, so it cannot be installed: " +
        "install it (apt-get install rabbitmq-server) or set TIDINGS_AMQP_URL to a running broker"
    )
  }
  const started = Date.now()
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" }
  for (const args of [["update"], ["install", "-y", "rabbitmq-server"]]) {
    // The package's own service start is refused by policy on some machines: the install still succeeds.
    const res = spawnSync("apt-get", args, { env, encoding: "utf8", timeout: 600_000 })
    if (res.status !== 0 && args[0] === "install") {
      throw new Error(
        `apt-get ${args.join(" ")} failed (${res.status ?? res.signal}): ${(res.stderr ?? "").slice(-2000)}`
      )
    }
  }
  if (!(await exists(SERVER))) {
    throw new Error("apt-get install rabbitmq-server succeeded but /usr/sbin/rabbitmq-server is missing")
  }
  return Date.now() - started
}

const run = (cmd: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv, timeoutMs: number): Promise<string> =>
  new Promise((resolve, reject) => {
    execFile(
      cmd,
      [...args],
      { env, timeout: timeoutMs, killSignal: "SIGKILL", maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error) {
          reject(
            new Error(`${path.basename(cmd)} ${args.join(" ")} failed: ${error.message}\n${stdout}\n${stderr}`.trim())
          )
        } else resolve(stdout)
      }
    )
  })

/**
 * `rabbitmqctl` bound to one node and its epmd. `home` (for a node run as the current non-root user)
 * is where the node's Erlang cookie lives; without it, Debian's wrapper presents the rabbitmq user's.
 */
export const makeControl = (
  node: string,
  epmdPort: number,
  amqpPort: number | undefined,
  home?: string
): RabbitControl => {
  const env = {
    ...process.env,
    ERL_EPMD_PORT: String(epmdPort),
    ERL_EPMD_ADDRESS: "127.0.0.1",
    ...(home === undefined ? {} : { HOME: home })
  }
  const command = home === undefined ? CTL : CTL_SCRIPT
  const ctl = (args: ReadonlyArray<string>, timeoutMs = 60_000) => run(command, ["-n", node, ...args], env, timeoutMs)
  const waitForPort = async (timeoutMs: number) => {
    if (amqpPort === undefined) return
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const open = await new Promise<boolean>((resolve) => {
        const socket = net.connect({ host: "127.0.0.1", port: amqpPort })
        socket.once("connect", () => (socket.destroy(), resolve(true)))
        socket.once("error", () => resolve(false))
      })
      if (open) return
      if (Date.now() > deadline) {
        throw new Error(`RabbitMQ ${node} did not listen on ${amqpPort} within ${timeoutMs} ms`)
      }
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  return {
    node,
    epmdPort,
    ctl,
    closeAllConnections: async (reason = "tidings fault test") => void (await ctl(["close_all_connections", reason])),
    stopApp: async () => void (await ctl(["stop_app"])),
    startApp: async () => {
      await ctl(["start_app"])
      await ctl(["await_startup", "--timeout", "60"])
      await waitForPort(30_000)
    }
  }
}

let counter = 0

/** Starts (or reuses, via `TIDINGS_AMQP_URL`) a RabbitMQ broker. */
export const startRabbit = async (options: StartOptions = {}): Promise<RunningRabbit> => {
  const external = process.env["TIDINGS_AMQP_URL"]
  if (options.private !== true && external !== undefined && external !== "") {
    const node = process.env["TIDINGS_RABBITMQ_NODE"]
    const epmd = Number(process.env["TIDINGS_RABBITMQ_EPMD_PORT"] ?? "4369")
    return {
      url: external,
      external: true,
      control: node === undefined || node === "" ? undefined : makeControl(node, epmd, undefined),
      timings: { installMs: 0, startMs: 0 },
      stop: async () => {}
    }
  }
  const installMs = await ensureInstalled()
  const root = isRoot()
  const started = Date.now()
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "tidings-rabbit-"))
  // Not root: the node runs as us, its Erlang cookie in a home of its own (the rabbitmq user's is not ours to read).
  const home = root ? undefined : path.join(dir, "home")
  if (home !== undefined) {
    await fs.mkdir(home, { mode: 0o700 })
    // Written before the node and rabbitmqctl start, so neither makes up a cookie of its own.
    const cookie = Array.from({ length: 20 }, () => String.fromCharCode(65 + Math.floor(Math.random() * 26))).join("")
    await fs.writeFile(path.join(home, ".erlang.cookie"), cookie, { mode: 0o400 })
  }
  const [amqpPort, distPort, epmdPort] = await Promise.all([freePort(), freePort(), freePort()])
  const pidFile = path.join(dir, "rabbit.pid")
  const node = `${options.name ?? "tidings"}-${process.pid}-${(counter++).toString(36)}${
    Math.random().toString(36).slice(2, 6)
  }@localhost`
  // A data directory not owned by rabbitmq fails with failed_to_create_feature_flags_file_directory.
  await fs.writeFile(path.join(dir, "enabled_plugins"), "[].\n")
  await fs.writeFile(
    path.join(dir, "rabbitmq.conf"),
    [
      `listeners.tcp.default = 127.0.0.1:${amqpPort}`,
      "loopback_users.guest = true",
      "log.console = false",
      "log.file.level = warning",
      ""
    ].join("\n")
  )
  let switchUser: Array<string> = []
  if (root) {
    const uid = Number(spawnSync("id", ["-u", "rabbitmq"], { encoding: "utf8" }).stdout.trim())
    const gid = Number(spawnSync("id", ["-g", "rabbitmq"], { encoding: "utf8" }).stdout.trim())
    if (!Number.isInteger(uid) || !Number.isInteger(gid)) {
      throw new Error("the rabbitmq OS user is missing (broken rabbitmq-server install?)")
    }
    for (const f of [dir, path.join(dir, "enabled_plugins"), path.join(dir, "rabbitmq.conf")]) {
      await fs.chown(f, uid, gid)
    }
    switchUser = [`--reuid=${uid}`, `--regid=${gid}`, "--init-groups"]
  }
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: home ?? RABBIT_HOME,
    RABBITMQ_NODENAME: node,
    RABBITMQ_NODE_IP_ADDRESS: "127.0.0.1",
    RABBITMQ_NODE_PORT: String(amqpPort),
    RABBITMQ_DIST_PORT: String(distPort),
    RABBITMQ_MNESIA_BASE: path.join(dir, "mnesia"),
    RABBITMQ_LOG_BASE: path.join(dir, "log"),
    RABBITMQ_PID_FILE: pidFile,
    RABBITMQ_CONFIG_FILE: path.join(dir, "rabbitmq.conf"),
    RABBITMQ_ADVANCED_CONFIG_FILE: path.join(dir, "advanced.config"),
    RABBITMQ_ENABLED_PLUGINS_FILE: path.join(dir, "enabled_plugins"),
    RABBITMQ_PLUGINS_EXPAND_DIR: path.join(dir, "plugins-expand"),
    RABBITMQ_CONF_ENV_FILE: path.join(dir, "rabbitmq-env.conf"),
    // Erlang distribution and its port mapper on loopback only, on a private epmd we can stop.
    ERL_EPMD_ADDRESS: "127.0.0.1",
    ERL_EPMD_PORT: String(epmdPort),
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS:
      "-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none",
    RABBITMQ_CTL_ERL_ARGS: "-kernel inet_dist_use_interface {127,0,0,1}"
  }
  let output = ""
  const log = (chunk: Buffer) => {
    const text = chunk.toString()
    output = (output + text).slice(-20_000)
    options.onLog?.(text)
  }
  // As root, setpriv switches to the rabbitmq user in place (the Debian wrapper's `su -c` would start
  // a new session that a group kill cannot reach). Detached: its own process group for a last-resort kill.
  const server: ChildProcess = spawn(
    root ? "setpriv" : SERVER_SCRIPT,
    root ? [...switchUser, SERVER_SCRIPT] : [],
    { env, cwd: home ?? RABBIT_HOME, detached: true, stdio: ["ignore", "pipe", "pipe"] }
  )
  server.stdout?.on("data", log)
  server.stderr?.on("data", log)
  let exited = false
  server.once("exit", () => void (exited = true))
  const killGroup = () => {
    if (exited || server.pid === undefined) return
    try {
      process.kill(-server.pid, "SIGKILL")
    } catch {
      // already gone
    }
  }
  const stopEpmd = () => {
    // epmd refuses to die while a (just killed) node is still registered; it notices within moments.
    const epmd = (arg: string) =>
      spawnSync("epmd", ["-port", String(epmdPort), arg], { encoding: "utf8", timeout: 2000 })
    for (let i = 0; i < 30 && /\bname \S+ at port/.test(epmd("-names").stdout ?? ""); i++) spawnSync("sleep", ["0.1"])
    epmd("-kill")
  }
  // If the test process exits without running teardown, leave neither the broker nor its epmd behind.
  const onExit = () => {
    killGroup()
    stopEpmd()
    rmSync(dir, { recursive: true, force: true })
  }
  process.once("exit", onExit)
  const control = makeControl(node, epmdPort, amqpPort, home)
  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    if (!exited) await control.ctl(["stop"], 30_000).catch(() => {})
    const deadline = Date.now() + 10_000
    while (!exited && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    killGroup()
    process.removeListener("exit", onExit)
    stopEpmd()
    await fs.rm(dir, { recursive: true, force: true }).catch(() => {})
  }
  try {
    // `wait` first waits for the pid file (the node is not known to epmd yet), then for the app.
    const ready = control.ctl(["wait", pidFile, "--timeout", "90"], 100_000)
    const died = new Promise<never>((_, reject) => {
      server.once(
        "exit",
        (code, signal) => reject(new Error(`rabbitmq-server exited during startup (${code ?? signal}):\n${output}`))
      )
    })
    await Promise.race([ready, died])
  } catch (error) {
    const logs = await fs.readdir(path.join(dir, "log")).catch(() => [] as Array<string>)
    let tail = ""
    for (const f of logs) {
      tail += `\n--- ${f}\n${(await fs.readFile(path.join(dir, "log", f), "utf8").catch(() => "")).slice(-3000)}`
    }
    await stop()
    throw new Error(`RabbitMQ node ${node} failed to start: ${String(error)}${tail}`)
  }
  return {
    url: `amqp://guest:guest@127.0.0.1:${amqpPort}/`,
    external: false,
    control,
    timings: { installMs, startMs: Date.now() - started },
    stop
  }
}
