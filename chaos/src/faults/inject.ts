/**
 * Carries out the fault plan against the running system. Faults with a duration (broker outages,
 * SIGSTOP pauses, the PostgreSQL restart, bursts of backend terminations) run in the background
 * while later faults fire, so they overlap as real incidents do. A fault that cannot apply at its
 * time waits until it can (closing connections of a stopped broker, terminating backends of a
 * restarting server), or hits another worker of the same role when its target is down or paused;
 * a second broker outage during one is skipped, and the record says so. `settle` waits for every running fault to end and returns when the last one ended: the
 * point the drain time is measured from.
 * @module
 */
import { sleep } from "../abort.ts"
import * as Db from "../db.ts"
import type { Fleet } from "../fleet.ts"
import { log, seconds } from "../log.ts"
import * as Malformed from "../malformed.ts"
import type { Random } from "../random.ts"
import type { Broker } from "../servers/broker.ts"
import type { Cluster } from "../servers/postgres.ts"
import { describe, type Fault, processKinds } from "./plan.ts"

/** How long a process fault waits for a worker of its role to be up (as long as workers get to start). */
const WORKER_WAIT_MS = 180_000

/** What happened to one planned fault. */
export interface FaultRecord {
  readonly fault: Fault
  /** The worker actually hit (may differ from the plan's). */
  target: string | undefined
  /** Epoch ms. */
  startedAt: number
  endedAt: number | undefined
  outcome: "running" | "done" | "skipped" | "failed"
  detail: string
}

/** What the injector works on. */
export interface Targets {
  readonly fleet: Fleet
  readonly cluster: Cluster
  readonly broker: Broker
  readonly sql: Db.Sql
  readonly random: Random
}

export class Injector {
  readonly records: Array<FaultRecord> = []
  /** Ids of the malformed messages published (confirmed by the broker). */
  readonly malformedIds: Array<string> = []
  readonly #targets: Targets
  readonly #signal: AbortSignal
  readonly #running = new Set<Promise<void>>()
  #brokerDown = false
  #pgRestarting = false
  #malformedBatches = 0

  constructor(targets: Targets, signal: AbortSignal) {
    this.#targets = targets
    this.#signal = signal
  }

  /** Fires every fault at its time after `phaseStart` (epoch ms); returns when the last one has fired. */
  async run(plan: ReadonlyArray<Fault>, phaseStart: number): Promise<void> {
    for (const fault of plan) {
      await sleep(phaseStart + fault.atMs - Date.now(), this.#signal)
      const done = this.#fire(fault)
      this.#running.add(done)
      // A failure is reported by `settle`; this only forgets the finished fault.
      done.then(() => this.#running.delete(done), () => this.#running.delete(done))
    }
  }

  /**
   * Waits for every fault still running; resolves with the epoch ms the last fault ended. Rejects when
   * a fault could not be carried out (the broker did not come back, ...): the run is then void.
   */
  async settle(): Promise<number> {
    while (this.#running.size > 0) await Promise.all([...this.#running])
    const failed = this.records.find((r) => r.outcome === "failed")
    if (failed !== undefined) {
      throw new Error(
        `fault #${failed.fault.index} (${
          describe(failed.fault, failed.target)
        }) could not be carried out: ${failed.detail}`
      )
    }
    return Math.max(
      0,
      ...this.records.flatMap((r) => r.endedAt === undefined || r.outcome === "skipped" ? [] : [r.endedAt])
    )
  }

  async #fire(fault: Fault): Promise<void> {
    const record: FaultRecord = {
      fault,
      target: fault.target,
      startedAt: Date.now(),
      endedAt: undefined,
      outcome: "running",
      detail: ""
    }
    this.records.push(record)
    const skip = (why: string) => {
      record.outcome = "skipped"
      record.endedAt = Date.now()
      record.detail = why
      log(`fault #${fault.index} skipped: ${describe(fault)} (${why})`)
    }
    if (processKinds.has(fault.kind)) {
      // Its role's workers may all be restarting or paused: wait for one rather than skip. A restart
      // on a loaded machine can take many seconds, so the bound is the one a first start gets.
      let target = this.#pickWorker(fault.target!)
      const since = Date.now()
      while (target === undefined && Date.now() - since < WORKER_WAIT_MS) {
        await sleep(200, this.#signal)
        target = this.#pickWorker(fault.target!)
      }
      if (target === undefined) {
        return skip(`no ${this.#targets.fleet.role(fault.target!)} was up to take it for ${seconds(WORKER_WAIT_MS)}`)
      }
      record.target = target
    }
    log(`fault #${fault.index}: ${describe(fault, record.target)}`)
    try {
      const detail = await this.#apply(fault, record.target, skip)
      if (record.outcome === "running") {
        record.detail = detail
        record.outcome = "done"
        record.endedAt = Date.now()
        if (fault.durationMs !== undefined || fault.kind === "pg-restart") {
          log(`fault #${fault.index} over: ${record.detail}`)
        }
      }
    } catch (error) {
      record.outcome = "failed"
      record.endedAt = Date.now()
      record.detail = error instanceof Error ? error.message : String(error)
      log(`fault #${fault.index} failed: ${record.detail}`)
      throw error
    }
  }

  /** The planned worker if it can be hit now, else another of its role that can, else undefined. */
  #pickWorker(planned: string): string | undefined {
    const { fleet, random } = this.#targets
    if (fleet.isAvailable(planned)) return planned
    const others = fleet.names(fleet.role(planned)).filter((n) => fleet.isAvailable(n))
    return others.length === 0 ? undefined : random.pick(others)
  }

  async #apply(fault: Fault, target: string | undefined, skip: (why: string) => void): Promise<string> {
    const { fleet, cluster, broker, sql } = this.#targets
    switch (fault.kind) {
      case "sigkill":
      case "sigterm": {
        fleet.signal(target!, fault.kind === "sigkill" ? "SIGKILL" : "SIGTERM")
        return "sent"
      }
      case "sigstop": {
        fleet.pause(target!)
        try {
          await sleep(fault.durationMs!, this.#signal)
        } finally {
          fleet.resume(target!)
        }
        return `${target} continued after ${seconds(fault.durationMs!)}`
      }
      case "broker-outage": {
        if (this.#brokerDown) {
          skip("the broker is already down")
          return ""
        }
        this.#brokerDown = true
        try {
          await broker.control.stopApp()
          const stoppedAt = Date.now()
          await sleep(fault.durationMs!, this.#signal)
          await broker.control.startApp()
          return `broker down ${seconds(Date.now() - stoppedAt)} (back and accepting connections)`
        } finally {
          this.#brokerDown = false
        }
      }
      case "close-connections": {
        // During an outage there is nothing to close: wait for the broker to be back.
        while (this.#brokerDown) await sleep(100, this.#signal)
        await broker.control.closeAllConnections("chaos: close_all_connections")
        return "closed"
      }
      case "terminate-backends": {
        while (this.#pgRestarting) await sleep(100, this.#signal)
        const until = Date.now() + fault.durationMs!
        let n = 0
        let rounds = 0
        while (Date.now() < until && !this.#pgRestarting) {
          n += await Db.retrying("pg_terminate_backend", () => Db.terminateBackends(sql, target), this.#signal)
          rounds++
          await sleep(100, this.#signal)
        }
        return `${n} backends terminated in ${rounds} rounds`
      }
      case "pg-restart": {
        this.#pgRestarting = true
        try {
          const { downMs } = await cluster.restart()
          return `PostgreSQL down ${seconds(downMs)}`
        } finally {
          this.#pgRestarting = false
        }
      }
      case "malformed": {
        const n = ++this.#malformedBatches
        for (let attempt = 1;; attempt++) {
          while (this.#brokerDown) await sleep(100, this.#signal)
          try {
            const ids = await Malformed.publish(broker.url, n)
            this.malformedIds.push(...ids)
            return `published ${ids.join(", ")}`
          } catch (error) {
            // A concurrent close_all_connections or outage; try again once the broker is there.
            if (attempt >= 20) throw error
            await sleep(500, this.#signal)
          }
        }
      }
    }
  }
}
