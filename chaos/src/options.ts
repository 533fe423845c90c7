/**
 * The harness's command line: `npm run chaos -- [--quick] [--seed N] [--seconds N] [--rate N]
 * [--runtime node|deno] [--report file.json] [--keep-logs dir]`, and the two profiles it picks from.
 * @module
 */
import * as Random from "./random.ts"

/** A bad command line: printed with the usage, exit code 2. */
export class UsageError extends Error {}

/** Everything a run needs to know; the profile gives the defaults. */
export interface Options {
  readonly quick: boolean
  readonly seed: number
  /** Length of the fault phase (load runs during it), seconds. */
  readonly faultSeconds: number
  /** Transactions per second over all producers. */
  readonly rate: number
  /** Share of transactions that roll back after appending their event. */
  readonly rollbackRatio: number
  /** Seconds between two fault injections, drawn uniformly from [min, max]. */
  readonly faultGap: readonly [number, number]
  /** Seconds the broker stays stopped in a broker outage. */
  readonly brokerOutage: readonly [number, number]
  /** The relays' lease, seconds; SIGSTOP pauses last longer than it. */
  readonly leaseSeconds: number
  /** Seconds a SIGSTOP pause lasts beyond the lease. */
  readonly pastLease: readonly [number, number]
  /** Seconds of load before the first fault. */
  readonly warmupSeconds: number
  /** The drain is given up after this long without progress (and no retry due), seconds. */
  readonly stallSeconds: number
  /** The drain is given up after this long in any case, seconds. */
  readonly maxDrainSeconds: number
  /** The full run fails when draining took longer than this after the last fault, seconds. */
  readonly drainBudgetSeconds: number
  /** Whether a slow drain, or failed outbox rows, fail the run (the full run's criteria). */
  readonly strict: boolean
  readonly producers: number
  readonly relays: number
  readonly consumers: number
  /** What runs the worker processes. */
  readonly runtime: "node" | "deno"
  /** Also write the report as JSON here. */
  readonly reportFile: string | undefined
  /** Keep every process's full output in this folder (by default logs live in the run's temp folder, removed at the end). */
  readonly keepLogs: string | undefined
}

export const usage = `usage: npm run chaos -- [--quick] [options]

Runs producer, relay and consumer processes on an embedded PostgreSQL and a private RabbitMQ node,
injects faults at random (seeded), lets the system drain and reports what was lost, published for a
rolled-back transaction, or handled twice. Exits 1 when a check fails (see chaos/README.md).

  --quick             about 2 minutes: 40 transactions/s, a 60 s fault phase with every kind of fault
                      at least once (default: 10 minutes at 100 transactions/s, a fault every 2-6 s)
  --seed N            the random seed (printed by every run; the same seed gives the same fault plan)
  --seconds N         length of the fault phase (600; quick 60)
  --rate N            transactions per second over all producers (100; quick 40)
  --runtime R         node (default) or deno: what runs the worker processes
  --report FILE       also write the report as JSON to FILE
  --keep-logs DIR     keep every process's output in DIR (otherwise removed with the run's temp folder)`

const numberFlags = new Set(["seed", "seconds", "rate"])
const stringFlags = new Set(["runtime", "report", "keep-logs"])
const booleanFlags = new Set(["quick", "help"])

/** Parses argv (without node and the script); `"help"` for --help. */
export const parse = (argv: ReadonlyArray<string>): Options | "help" => {
  const values = new Map<string, string | true>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === "--") continue // npm and pnpm pass it through
    if (!arg.startsWith("--")) throw new UsageError(`unexpected argument ${JSON.stringify(arg)}`)
    const [name, inline] = arg.slice(2).split("=", 2) as [string, string | undefined]
    if (booleanFlags.has(name)) {
      values.set(name, true)
    } else if (numberFlags.has(name) || stringFlags.has(name)) {
      const value = inline ?? argv[++i]
      if (value === undefined || value.startsWith("--")) throw new UsageError(`--${name} needs a value`)
      values.set(name, value)
    } else {
      throw new UsageError(`unknown option --${name}`)
    }
  }
  if (values.has("help")) return "help"
  const num = (name: string, fallback: number, min: number) => {
    const raw = values.get(name)
    if (raw === undefined) return fallback
    const n = Number(raw)
    if (!Number.isFinite(n) || n < min) throw new UsageError(`--${name} must be a number >= ${min}, got ${String(raw)}`)
    return n
  }
  const str = (name: string) => {
    const raw = values.get(name)
    return typeof raw === "string" ? raw : undefined
  }
  const quick = values.has("quick")
  const runtime = str("runtime") ?? "node"
  if (runtime !== "node" && runtime !== "deno") throw new UsageError(`--runtime must be node or deno, got ${runtime}`)
  const seed = Math.floor(num("seed", Random.freshSeed(), 0))
  return {
    quick,
    seed,
    faultSeconds: num("seconds", quick ? 60 : 600, 10),
    rate: num("rate", quick ? 40 : 100, 1),
    rollbackRatio: 0.1,
    faultGap: [2, 6],
    brokerOutage: quick ? [3, 8] : [5, 25],
    leaseSeconds: 10,
    pastLease: [1, 4],
    warmupSeconds: quick ? 3 : 10,
    stallSeconds: quick ? 45 : 90,
    maxDrainSeconds: quick ? 300 : 900,
    drainBudgetSeconds: 30,
    strict: !quick,
    producers: 2,
    relays: 2,
    consumers: 2,
    runtime,
    reportFile: str("report"),
    keepLogs: str("keep-logs")
  }
}
