/**
 * Runs the bundled Worker on the real `workerd` runtime (the npm package `workerd`, the same runtime
 * Cloudflare deploys, on 127.0.0.1 and no account): a generated config with the Worker and its
 * bindings, plus a small harness Worker that fires its cron trigger through workerd's own
 * `Fetcher.scheduled()` (as `wrangler dev --test-scheduled` does), since a local workerd has no
 * cron clock of its own.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

// The npm package's CommonJS main exports the path of the binary for this platform.
const workerdBinary: string = createRequire(import.meta.url)("workerd").default

/** Options of {@link start}. */
export interface LocalOptions {
  /** The bundle made by `build.ts`. */
  readonly bundle: string
  /** Text bindings of the Worker (`DATABASE_URL`, `WEBHOOK_URL`, ...). */
  readonly bindings: Readonly<Record<string, string>>
}

/** A running workerd. */
export interface LocalWorker {
  /** `http://127.0.0.1:<port>`: the Worker's fetch handler. */
  readonly url: string
  /** Fires the Worker's `scheduled` handler once and waits for it; rejects with its error. */
  readonly scheduled: (cron?: string) => Promise<void>
  /** What workerd printed (the Worker's console output among it). */
  readonly output: () => string
  readonly stop: () => Promise<void>
}

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

const trigger = `export default {
  async fetch(request, env) {
    const cron = new URL(request.url).searchParams.get("cron") ?? "* * * * *"
    try {
      await env.WORKER.scheduled({ cron, scheduledTime: new Date() })
      return Response.json({ ok: true })
    } catch (error) {
      return Response.json({ ok: false, error: String(error && error.stack || error) }, { status: 500 })
    }
  }
}
`

const capnpString = (s: string) => JSON.stringify(s)

/** Writes the config, starts `workerd serve` and waits until the Worker answers. */
export const start = async (options: LocalOptions): Promise<LocalWorker> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-workerd-"))
  fs.copyFileSync(options.bundle, path.join(dir, "worker.js"))
  fs.writeFileSync(path.join(dir, "trigger.js"), trigger)
  const [httpPort, cronPort] = [await freePort(), await freePort()]
  const bindings = Object.entries(options.bindings).map(([name, text]) =>
    `(name = ${capnpString(name)}, text = ${capnpString(text)})`
  ).join(", ")
  fs.writeFileSync(
    path.join(dir, "config.capnp"),
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "edge", worker = .edge),
    (name = "cron", worker = .cron),
    # Outbound fetch() and connect() (the webhook receiver, PostgreSQL) may reach this machine.
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [
    (name = "http", address = "127.0.0.1:${httpPort}", http = (), service = "edge"),
    (name = "cron", address = "127.0.0.1:${cronPort}", http = (), service = "cron"),
  ],
);
const edge :Workerd.Worker = (
  modules = [ (name = "worker.js", esModule = embed "worker.js") ],
  compatibilityDate = "2026-11-01",
  bindings = [ ${bindings} ],
);
const cron :Workerd.Worker = (
  modules = [ (name = "trigger.js", esModule = embed "trigger.js") ],
  compatibilityDate = "2026-11-01",
  bindings = [ (name = "WORKER", service = "edge") ],
);
`
  )
  let output = ""
  const child: ChildProcess = spawn(workerdBinary, ["serve", path.join(dir, "config.capnp"), "--verbose"], {
    stdio: ["ignore", "pipe", "pipe"]
  })
  child.stdout?.on("data", (d: Buffer) => void (output += d.toString()))
  child.stderr?.on("data", (d: Buffer) => void (output += d.toString()))
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM")
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000)
      await exited
      clearTimeout(timer)
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }
  const url = `http://127.0.0.1:${httpPort}`
  // Up once both sockets answer (workerd prints nothing when it listens).
  const deadline = Date.now() + 60_000
  for (const port of [httpPort, cronPort]) {
    while (true) {
      if (child.exitCode !== null) {
        await stop()
        throw new Error(`workerd exited (${child.exitCode}):\n${output}`)
      }
      const up = await new Promise<boolean>((resolve) => {
        const socket = net.connect(port, "127.0.0.1", () => {
          socket.end()
          resolve(true)
        })
        socket.once("error", () => resolve(false))
      })
      if (up) break
      if (Date.now() > deadline) {
        await stop()
        throw new Error(`workerd did not listen within 60 s:\n${output}`)
      }
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  return {
    url,
    output: () => output,
    scheduled: async (cron = "*/5 * * * *") => {
      const response = await fetch(`http://127.0.0.1:${cronPort}/?cron=${encodeURIComponent(cron)}`)
      const result = await response.json() as { ok: boolean; error?: string }
      if (!result.ok) throw new Error(`the scheduled handler failed: ${result.error}`)
    },
    stop
  }
}
