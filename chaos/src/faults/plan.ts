/**
 * The fault plan: when each fault happens, what it is and whom it hits, drawn from the run's seed
 * before anything starts (and printed), so the same seed replays the same plan. Faults come every
 * `faultGap` seconds; every kind occurs at least once and the PostgreSQL restart exactly once.
 * Process faults rotate over the roles (producer, relay, consumer) so that each role is hit.
 * @module
 */
import type { Role } from "../fleet.ts"
import { seconds } from "../log.ts"
import type { Options } from "../options.ts"
import type { Random } from "../random.ts"

export type Kind =
  | "sigkill"
  | "sigterm"
  | "sigstop"
  | "broker-outage"
  | "close-connections"
  | "terminate-backends"
  | "pg-restart"
  | "malformed"

export const kinds: ReadonlyArray<Kind> = [
  "sigkill",
  "sigterm",
  "sigstop",
  "broker-outage",
  "close-connections",
  "terminate-backends",
  "pg-restart",
  "malformed"
]

/** Kinds that hit one worker process. */
export const processKinds: ReadonlySet<Kind> = new Set(["sigkill", "sigterm", "sigstop"])

/** Relative frequency of the kinds after each has had its turn (the PostgreSQL restart happens once). */
const weights: Record<Exclude<Kind, "pg-restart">, number> = {
  sigkill: 20,
  sigterm: 14,
  sigstop: 10,
  "broker-outage": 8,
  "close-connections": 12,
  "terminate-backends": 24,
  malformed: 12
}

/** One planned fault. */
export interface Fault {
  readonly index: number
  /** Milliseconds after the fault phase starts. */
  readonly atMs: number
  readonly kind: Kind
  /** The worker (process faults; backend termination of one worker), if any. */
  readonly target?: string
  /** How long the broker stays down, the process stays stopped, or backends keep being terminated. */
  readonly durationMs?: number
}

/** `SIGKILL relay-2`, `broker stopped for 7.2 s`, ... */
export const describe = (fault: Fault, target = fault.target): string => {
  switch (fault.kind) {
    case "sigkill":
      return `SIGKILL ${target}`
    case "sigterm":
      return `SIGTERM ${target}`
    case "sigstop":
      return `SIGSTOP ${target} for ${seconds(fault.durationMs ?? 0)}, then SIGCONT`
    case "broker-outage":
      return `broker stop_app for ${seconds(fault.durationMs ?? 0)}, then start_app`
    case "close-connections":
      return "rabbitmqctl close_all_connections"
    case "terminate-backends":
      return `pg_terminate_backend of ${
        target === undefined ? "every worker's backends" : `${target}'s backends`
      } every 100 ms for ${seconds(fault.durationMs ?? 0)}`
    case "pg-restart":
      return "PostgreSQL restart (fast shutdown, start on the same port and data directory)"
    case "malformed":
      return "malformed messages onto the consumers' queue (bad JSON, unknown type, version \"abc\")"
  }
}

/** Draws the plan. */
export const make = (
  options: Options,
  random: Random,
  workers: ReadonlyArray<{ readonly name: string; readonly role: Role }>
): Array<Fault> => {
  const phaseMs = options.faultSeconds * 1000
  const times: Array<number> = []
  for (
    let t = random.between(options.faultGap[0], options.faultGap[1]) * 1000;
    t < phaseMs;
    t += random.between(options.faultGap[0], options.faultGap[1]) * 1000
  ) {
    times.push(Math.round(t))
  }
  // Every kind once, in random slots; the rest by weight.
  const slotKinds: Array<Kind | undefined> = times.map(() => undefined)
  const slots = random.shuffle(times.map((_, i) => i))
  random.shuffle(kinds).forEach((kind, i) => {
    if (i < slots.length) slotKinds[slots[i]!] = kind
  })
  const roles = random.shuffle<Role>(["producer", "relay", "consumer"])
  let processFaults = 0
  const plan: Array<Fault> = []
  times.forEach((atMs, index) => {
    const kind = slotKinds[index] ?? random.weighted(weights)
    const base = { index: index + 1, atMs, kind }
    if (processKinds.has(kind)) {
      const role = roles[processFaults++ % roles.length]!
      const target = random.pick(workers.filter((w) => w.role === role)).name
      const durationMs = kind === "sigstop"
        ? Math.round((options.leaseSeconds + random.between(options.pastLease[0], options.pastLease[1])) * 1000)
        : undefined
      plan.push(durationMs === undefined ? { ...base, target } : { ...base, target, durationMs })
    } else if (kind === "broker-outage") {
      plan.push({
        ...base,
        durationMs: Math.round(random.between(options.brokerOutage[0], options.brokerOutage[1]) * 1000)
      })
    } else if (kind === "terminate-backends") {
      // A burst, so that connections being re-opened are hit too (during connect, as in a failover).
      const burst = { ...base, durationMs: Math.round(random.between(1, 3) * 1000) }
      plan.push(random.next() < 0.5 ? burst : { ...burst, target: random.pick(workers).name })
    } else {
      plan.push(base)
    }
  })
  return plan
}
