/**
 * The worker processes and their supervisor. Each worker runs in a process group of its own (so a
 * Ctrl-C in the terminal reaches only the harness, which then stops them) with its standard input
 * held by the harness (its end tells an orphaned worker to stop). An exited worker is started again
 * after a second, as a service manager would.
 *
 * Every exit is classified: after the harness's SIGKILL, death by SIGKILL is expected; after its
 * SIGTERM, exit code 0 (or death by SIGTERM, before the worker installed its handler) is expected.
 * Anything else is a crash: the process exited on its own, or with an error during its shutdown.
 * A worker still alive `termGraceMs` after SIGTERM is killed and reported as hung. The last lines
 * of each incarnation's output are kept for the report; the full output goes to a log file.
 * @module
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { excerpt } from "./excerpt.ts"
import { log, seconds } from "./log.ts"

export type Role = "producer" | "relay" | "consumer"

/** A worker to run. */
export interface WorkerSpec {
  readonly name: string
  readonly role: Role
  readonly script: string
  readonly env: Readonly<Record<string, string>>
}

/** How one incarnation of a worker ended. */
export interface ExitRecord {
  readonly name: string
  readonly role: Role
  readonly incarnation: number
  readonly pid: number
  readonly code: number | null
  readonly signal: string | null
  /** Epoch ms. */
  readonly at: number
  readonly uptimeMs: number
  /** The last signal the harness sent it (the exit is expected after it). */
  readonly sent: "SIGKILL" | "SIGTERM" | undefined
  /** The harness did not cause this exit (or the process failed during its shutdown). */
  readonly crashed: boolean
  /** Whether it had printed `ready`. */
  readonly ready: boolean
  /** SIGTERM to exit, ms (when the harness sent SIGTERM). */
  readonly shutdownMs: number | undefined
  /** Still alive `termGraceMs` after SIGTERM: killed by the harness. */
  readonly hung: boolean
  /** `exit code 1`, `signal SIGKILL`, ... */
  readonly how: string
  /** The last lines of its output. */
  readonly tail: ReadonlyArray<string>
}

/** Settings of the fleet. */
export interface FleetOptions {
  readonly runtime: "node" | "deno"
  /** Where each incarnation's full output goes (`<name>.<incarnation>.log`). */
  readonly logDir: string
  readonly restartDelayMs: number
  readonly termGraceMs: number
}

interface Incarnation {
  readonly number: number
  readonly child: ChildProcess
  readonly pid: number
  readonly startedAt: number
  readyAt: number | undefined
  exited: boolean
  paused: boolean
  sent: "SIGKILL" | "SIGTERM" | undefined
  sentAt: number | undefined
  hung: boolean
  readonly tail: Array<string>
  readonly done: Promise<void>
}

interface Worker {
  readonly spec: WorkerSpec
  starts: number
  current: Incarnation | undefined
  /** Commands sent to every incarnation started from now on, too. */
  readonly sticky: Array<string>
}

const TAIL_LINES = 40
// eslint-disable-next-line no-control-regex
const ansi = /\u001b\[[0-9;]*m/g

const repoRoot = path.resolve(import.meta.dirname, "..", "..")

/** The command that runs a TypeScript file on `runtime`. */
const commandFor = (runtime: "node" | "deno", script: string): [string, Array<string>] =>
  runtime === "node"
    ? [process.execPath, [script]]
    : [process.env["TIDINGS_DENO"] ?? path.join(repoRoot, "node_modules", ".bin", "deno"), [
      "run",
      "-A",
      "--quiet",
      script
    ]]

/** The supervisor of the run's workers. */
export class Fleet {
  readonly exits: Array<ExitRecord> = []
  /** Instance ids a worker announced (`instance <id>` on stdout, the consumers' inbox instance) → name and incarnation. */
  readonly instances = new Map<string, { readonly name: string; readonly incarnation: number }>()
  readonly #workers = new Map<string, Worker>()
  readonly #options: FleetOptions
  readonly #restarts = new Set<ReturnType<typeof setTimeout>>()
  #closing = false

  constructor(specs: ReadonlyArray<WorkerSpec>, options: FleetOptions) {
    this.#options = options
    for (const spec of specs) this.#workers.set(spec.name, { spec, starts: 0, current: undefined, sticky: [] })
  }

  /** Starts every worker. */
  start(): void {
    for (const worker of this.#workers.values()) this.#spawn(worker)
  }

  /** `consumer-2 #4 (exit code 1 at +172.8s)`: who an announced instance id was, and how it ended. */
  describeInstances(at: (epochMs: number) => string): Record<string, string> {
    const out: Record<string, string> = {}
    for (const [id, { name, incarnation }] of this.instances) {
      const exit = this.exits.find((e) => e.name === name && e.incarnation === incarnation)
      const end = exit === undefined
        ? ""
        : exit.crashed
        ? ` (crashed: ${exit.how} at ${at(exit.at)})`
        : exit.sent === undefined
        ? ""
        : ` (${exit.sent} at ${at(exit.at)})`
      out[id] = `${name} #${incarnation}${end}`
    }
    return out
  }

  /** Names of the workers (of one role). */
  names(role?: Role): Array<string> {
    return [...this.#workers.values()].filter((w) => role === undefined || w.spec.role === role).map((w) => w.spec.name)
  }

  role(name: string): Role {
    return this.#worker(name).spec.role
  }

  /** Starts per worker (1 + restarts). */
  starts(): Record<string, number> {
    return Object.fromEntries([...this.#workers.values()].map((w) => [w.spec.name, w.starts]))
  }

  /** Running, ready, not paused and not already signalled: a fair target for a fault. */
  isAvailable(name: string): boolean {
    const c = this.#worker(name).current
    return c !== undefined && !c.exited && c.readyAt !== undefined && !c.paused && c.sent === undefined
  }

  /** Whether every worker's current incarnation is up and ready. */
  allReady(): boolean {
    return [...this.#workers.values()].every((w) =>
      w.current !== undefined && !w.current.exited && w.current.readyAt !== undefined
    )
  }

  /** Resolves once every worker is ready; rejects when `signal` aborts or after `timeoutMs` (naming who is not). */
  async waitReady(signal: AbortSignal, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs
    while (!this.allReady()) {
      if (signal.aborted) throw new Error("interrupted")
      if (Date.now() > deadline) {
        const late = [...this.#workers.values()].filter((w) => w.current?.readyAt === undefined)
        throw new Error(
          `workers not ready after ${seconds(timeoutMs)}: ${
            late.map((w) => `${w.spec.name}\n  ${(w.current?.tail ?? []).join("\n  ")}`).join("\n")
          }`
        )
      }
      await new Promise((r) => setTimeout(r, 100))
    }
  }

  /** Sends SIGKILL or SIGTERM to the current incarnation; false when it is not there. */
  signal(name: string, sig: "SIGKILL" | "SIGTERM"): boolean {
    const c = this.#worker(name).current
    if (c === undefined || c.exited) return false
    c.sent = sig
    c.sentAt = Date.now()
    try {
      process.kill(c.pid, sig)
    } catch {
      return false
    }
    if (sig === "SIGTERM") {
      const timer = setTimeout(() => {
        if (c.exited) return
        c.hung = true
        log(`${name} (pid ${c.pid}) still running ${seconds(this.#options.termGraceMs)} after SIGTERM: killing it`)
        try {
          process.kill(c.pid, "SIGCONT")
          process.kill(c.pid, "SIGKILL")
        } catch {
          // gone meanwhile
        }
      }, this.#options.termGraceMs)
      void c.done.then(() => clearTimeout(timer))
    }
    return true
  }

  /** SIGSTOP; false when the worker is not available. */
  pause(name: string): boolean {
    const c = this.#worker(name).current
    if (c === undefined || c.exited || c.paused) return false
    c.paused = true
    try {
      process.kill(c.pid, "SIGSTOP")
      return true
    } catch {
      c.paused = false
      return false
    }
  }

  /** SIGCONT for a paused worker. */
  resume(name: string): void {
    const c = this.#worker(name).current
    if (c === undefined || !c.paused) return
    c.paused = false
    try {
      process.kill(c.pid, "SIGCONT")
    } catch {
      // exited meanwhile
    }
  }

  /** Writes `command` to the worker's standard input, now and (sticky) to every later incarnation. */
  command(name: string, command: string): void {
    const worker = this.#worker(name)
    worker.sticky.push(command)
    const c = worker.current
    if (c !== undefined && !c.exited) c.child.stdin?.write(`${command}\n`)
  }

  /**
   * Stops the fleet: no more restarts, paused workers continued, SIGTERM to all, and waits for every
   * exit (hung ones are killed after `termGraceMs`).
   */
  async shutdown(): Promise<void> {
    this.#closing = true
    for (const timer of this.#restarts) clearTimeout(timer)
    this.#restarts.clear()
    const waits: Array<Promise<void>> = []
    for (const worker of this.#workers.values()) {
      const c = worker.current
      if (c === undefined || c.exited) continue
      if (c.paused) this.resume(worker.spec.name)
      if (c.sent === undefined) this.signal(worker.spec.name, "SIGTERM")
      waits.push(c.done)
    }
    await Promise.all(waits)
  }

  /** Last resort (from an `exit` handler): SIGCONT and SIGKILL to every live worker, synchronously. */
  killAllNow(): void {
    this.#closing = true
    for (const worker of this.#workers.values()) {
      const c = worker.current
      if (c === undefined || c.exited) continue
      try {
        process.kill(c.pid, "SIGCONT")
        process.kill(c.pid, "SIGKILL")
      } catch {
        // gone
      }
    }
  }

  #worker(name: string): Worker {
    const worker = this.#workers.get(name)
    if (worker === undefined) throw new Error(`no worker ${name}`)
    return worker
  }

  #spawn(worker: Worker): void {
    const number = worker.starts++
    const { spec } = worker
    const [cmd, args] = commandFor(this.#options.runtime, spec.script)
    const child = spawn(cmd, args, {
      // No colours: Deno colours its fatal errors, which would spoil the logs and the report.
      env: { ...process.env, ...spec.env, CHAOS_NAME: spec.name, CHAOS_INCARNATION: String(number), NO_COLOR: "1" },
      stdio: ["pipe", "pipe", "pipe"],
      detached: true
    })
    const logFile = fs.createWriteStream(path.join(this.#options.logDir, `${spec.name}.${number}.log`))
    const tail: Array<string> = []
    let resolveDone!: () => void
    const done = new Promise<void>((r) => (resolveDone = r))
    const incarnation: Incarnation = {
      number,
      child,
      pid: child.pid ?? -1,
      startedAt: Date.now(),
      readyAt: undefined,
      exited: false,
      paused: false,
      sent: undefined,
      sentAt: undefined,
      hung: false,
      tail,
      done
    }
    worker.current = incarnation
    const onLines = (stream: "out" | "err") => {
      let partial = ""
      return (chunk: Buffer) => {
        logFile.write(chunk)
        const lines = (partial + chunk.toString()).split("\n")
        partial = lines.pop() ?? ""
        for (const raw of lines) {
          const line = raw.replace(ansi, "")
          const announced = stream === "out" ? /^instance (\S+)$/.exec(line) : null
          if (announced !== null) this.instances.set(announced[1]!, { name: spec.name, incarnation: number })
          if (stream === "out" && line === "ready" && incarnation.readyAt === undefined) {
            incarnation.readyAt = Date.now()
            if (number > 0) {
              log(`${spec.name} #${number} ready after ${seconds(incarnation.readyAt - incarnation.startedAt)}`)
            }
          }
          tail.push(line.length > 400 ? `${line.slice(0, 400)}…` : line)
          if (tail.length > TAIL_LINES) tail.shift()
        }
      }
    }
    child.stdout?.on("data", onLines("out"))
    child.stderr?.on("data", onLines("err"))
    child.stdin?.on("error", () => undefined) // EPIPE once it died
    for (const command of worker.sticky) child.stdin?.write(`${command}\n`)
    child.once("error", (error) => {
      tail.push(`spawn failed: ${error.message}`)
    })
    child.once("close", (code, signal) => {
      incarnation.exited = true
      logFile.end()
      const record = this.#classify(spec, incarnation, code, signal)
      this.exits.push(record)
      if (record.crashed) {
        log(
          `CRASH: ${spec.name} #${number} (pid ${record.pid}) ${record.how}${
            record.sent === undefined ? "" : ` after the harness's ${record.sent}`
          }; output:\n    ${excerpt(tail, 10).join("\n    ")}`
        )
      }
      resolveDone()
      if (!this.#closing) {
        const timer = setTimeout(() => {
          this.#restarts.delete(timer)
          if (!this.#closing) this.#spawn(worker)
        }, this.#options.restartDelayMs)
        this.#restarts.add(timer)
      }
    })
  }

  #classify(spec: WorkerSpec, c: Incarnation, code: number | null, signal: string | null): ExitRecord {
    const how = signal !== null ? `signal ${signal}` : `exit code ${code}`
    let crashed: boolean
    if (c.hung) crashed = false // reported as hung instead
    else if (c.sent === "SIGKILL") crashed = signal !== "SIGKILL"
    else if (c.sent === "SIGTERM") crashed = !(code === 0 || signal === "SIGTERM")
    else crashed = true
    const at = Date.now()
    return {
      name: spec.name,
      role: spec.role,
      incarnation: c.number,
      pid: c.pid,
      code,
      signal,
      at,
      uptimeMs: at - c.startedAt,
      sent: c.sent,
      crashed,
      ready: c.readyAt !== undefined,
      shutdownMs: c.sent === "SIGTERM" && c.sentAt !== undefined ? at - c.sentAt : undefined,
      hung: c.hung,
      how,
      tail: [...c.tail]
    }
  }
}
