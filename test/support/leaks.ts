/**
 * Leak check, run after each test file (a vitest setup file): when the file's tests and hooks are
 * done, nothing they started may still be running in this process (sockets, servers, timers, child
 * processes: `process.getActiveResourcesInfo()` beyond what was open when the file started) nor in
 * the test PostgreSQL (connections under the file's `application_name`, which `pgUrl()` puts in the
 * URL it hands to clients and child processes). Things close asynchronously, so the check waits for
 * the state and fails only when it stops improving (test/support/progress.ts), reporting what leaked.
 * A leaked fiber shows up here as the timer or socket it keeps.
 * @module
 */
import postgres from "postgres"
import { afterAll, inject } from "vitest"
import { waitFor } from "./progress.ts"

/** Resource kinds that are not ours to close (the runtime's own, transient requests). */
const ignored = new Set([
  "TTYWrap",
  "FSReqCallback",
  "FSReqPromise",
  "Immediate",
  "GetAddrInfoReqWrap",
  "FileHandle",
  "StatWatcher",
  "FSEventWrap"
])

const count = (kinds: ReadonlyArray<string>): Map<string, number> => {
  const counts = new Map<string, number>()
  for (const kind of kinds) if (!ignored.has(kind)) counts.set(kind, (counts.get(kind) ?? 0) + 1)
  return counts
}

const activeResources = (): ReadonlyArray<string> =>
  typeof process.getActiveResourcesInfo === "function" ? process.getActiveResourcesInfo() : []

/** The resources open beyond `baseline`, by kind. */
const beyond = (baseline: Map<string, number>): Record<string, number> => {
  const extra: Record<string, number> = {}
  // The process's own standard streams, opened on first use (a CLI checking whether stdin is a
  // terminal): not the file's to close.
  const std = handles().filter((h) => !baselineHandles.has(h) && [0, 1, 2].includes((h as any)?._handle?.fd)).length
  for (const [kind, n] of count(activeResources())) {
    const more = n - (baseline.get(kind) ?? 0) - (kind === "PipeWrap" ? std : 0)
    if (more > 0) extra[kind] = more
  }
  return extra
}

const baseline = count(activeResources())
const baselineHandles = new Set(handles())

/** Node's handle objects (sockets, servers, child processes, timers), for the report. */
function handles(): ReadonlyArray<unknown> {
  const get = (process as unknown as { _getActiveHandles?: () => ReadonlyArray<unknown> })._getActiveHandles
  return typeof get === "function" ? get.call(process) : []
}

/** What the handles opened since the file started are: `Socket 127.0.0.1:5432`, `ChildProcess 1234 node x.ts`. */
const newHandles = (): string =>
  handles().filter((h) => !baselineHandles.has(h)).map((h) => {
    const o = h as Record<string, any>
    const name = o?.constructor?.name ?? typeof h
    if (o?.remotePort !== undefined) return `${name} ${o.remoteAddress}:${o.remotePort}`
    if (o?.pid !== undefined && o?.spawnargs !== undefined) {
      return `${name} ${o.pid} ${o.spawnargs.join(" ").slice(0, 120)}`
    }
    if (o?._handle?.fd !== undefined && o._handle.fd >= 0) return `${name} fd ${o._handle.fd}`
    return name
  }).join(", ")

/** The `application_name` of this file's PostgreSQL connections (see `pgUrl()` in pg.ts). */
export const applicationName: string = `tidings-test-${process.pid}-${Date.now().toString(36)}-${
  Math.random().toString(36).slice(2, 8)
}`
;(globalThis as Record<symbol, unknown>)[Symbol.for("tidings/test/applicationName")] = applicationName

interface Connection {
  readonly pid: number
  readonly state: string | null
  readonly query: string
}

const leftConnections = async (url: string): Promise<void> => {
  const sql = postgres(url, { max: 1, connection: { application_name: "tidings-leak-check" }, onnotice: () => {} })
  try {
    await waitFor<ReadonlyArray<Connection>>({
      what: `the connections of ${applicationName} to close`,
      read: async () => [
        ...await sql<Array<Connection>>`
          SELECT pid, state, left(query, 120) AS query FROM pg_stat_activity
          WHERE application_name = ${applicationName} AND pid <> pg_backend_pid()
          ORDER BY pid`
      ],
      done: (rows) => rows.length === 0,
      progress: (rows) => rows.length,
      describe: (rows) => rows.map((r) => `pid ${r.pid} ${r.state ?? "?"}: ${r.query}`).join("; ")
    })
  } finally {
    await sql.end({ timeout: 5 })
  }
}

// Registered first, so it runs after every other afterAll of the file (hooks run as a stack). No
// hook timeout (0): its timer would count as a leaked timer; the wait bounds itself.
afterAll(async () => {
  const leaks: Array<string> = []
  const url = inject("pgUrl")
  if (url !== undefined) await leftConnections(url).catch((error: Error) => leaks.push(error.message))
  await waitFor({
    what: "the file's sockets, servers, timers and child processes to close",
    read: () => beyond(baseline),
    done: (extra) => Object.keys(extra).length === 0,
    progress: (extra) => Object.values(extra).reduce((a, b) => a + b, 0),
    describe: (extra) => `open beyond the start of the file: ${JSON.stringify(extra)} ${newHandles()}`
  }).catch((error: Error) => leaks.push(error.message))
  if (leaks.length > 0) throw new Error(`leak check: the file left work running\n- ${leaks.join("\n- ")}`)
}, 0)
