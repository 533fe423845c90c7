/**
 * The machine a run happened on, for the report: figures from different machines do not compare.
 * @module
 */
import * as fs from "node:fs"
import * as os from "node:os"
import { round } from "./stats.ts"

/** Cores, memory, CPU, OS and Node of this machine. */
export interface Machine {
  readonly cpus: number
  readonly cpuModel: string
  readonly memoryGiB: number
  readonly os: string
  readonly node: string
}

/** The 1-, 5- and 15-minute load averages, rounded. */
export const loadAverage = (): ReadonlyArray<number> => os.loadavg().map((n) => round(n, 2))

const osName = (): string => {
  try {
    const release = fs.readFileSync("/etc/os-release", "utf8")
    const pretty = /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(release)?.[1]
    if (pretty !== undefined) return `${pretty} (${os.type()} ${os.release()})`
  } catch {
    // not Linux
  }
  return `${os.type()} ${os.release()}`
}

export const machine = (): Machine => {
  const cpus = os.cpus()
  return {
    // What the process may use (cgroup / affinity limits), not what the host has.
    cpus: typeof os.availableParallelism === "function" ? os.availableParallelism() : cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? "unknown",
    memoryGiB: round(os.totalmem() / 1024 ** 3, 1),
    os: osName(),
    node: process.version
  }
}
