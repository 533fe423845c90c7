/**
 * One chaos run, phase by phase: servers (PostgreSQL and RabbitMQ, in parallel), schema and
 * topology, the workers (until every one is ready), warm-up load, the fault phase, the end of the
 * load, the drain, the workers' shutdown, the checks. Everything started is registered with the
 * run's `Cleanup` as soon as it exists.
 * @module
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { sleep } from "./abort.ts"
import * as Amqp from "./amqp.ts"
import type { Cleanup } from "./cleanup.ts"
import * as Db from "./db.ts"
import * as Drain from "./drain.ts"
import { Injector } from "./faults/inject.ts"
import * as Plan from "./faults/plan.ts"
import { Fleet } from "./fleet.ts"
import { elapsed, log, seconds } from "./log.ts"
import type { Options } from "./options.ts"
import * as Random from "./random.ts"
import * as Report from "./report.ts"
import * as Roster from "./roster.ts"
import * as BrokerServer from "./servers/broker.ts"
import * as PostgresServer from "./servers/postgres.ts"
import * as Verify from "./verify.ts"

/** The library's default shutdown timeout of relays and consumers (the workers keep it). */
const SHUTDOWN_TIMEOUT_MS = 10_000

/** Starts both servers; whichever started is registered for cleanup even when the other failed. */
const startServers = async (runDir: string, cleanup: Cleanup) => {
  const pgLog: Array<string> = []
  const [pg, broker] = await Promise.allSettled([
    PostgresServer.start(path.join(runDir, "pg"), (line) => void pgLog.push(line)),
    BrokerServer.start()
  ])
  if (pg.status === "fulfilled") cleanup.add("stop PostgreSQL", pg.value.stop, pg.value.killNow)
  if (broker.status === "fulfilled") cleanup.add("stop RabbitMQ", broker.value.stop)
  if (pg.status === "rejected") {
    throw new Error(`PostgreSQL did not start: ${String(pg.reason)}\n${pgLog.slice(-20).join("")}`)
  }
  if (broker.status === "rejected") throw new Error(`RabbitMQ did not start: ${String(broker.reason)}`)
  return { cluster: pg.value, broker: broker.value }
}

/** Logs the system's numbers every 10 s while the load runs (never overlapping, never failing the run). */
const progress = (sql: Db.Sql, amqpUrl: string, fleet: Fleet, injector: Injector) => {
  let busy = false
  const timer = setInterval(() => {
    if (busy) return
    busy = true
    Drain.snapshot(sql, amqpUrl).then(
      (s) =>
        log(
          `${Drain.summary(s)}; faults ${injector.records.length}, crashes ${
            fleet.exits.filter((e) => e.crashed).length
          }`
        ),
      () => undefined
    ).finally(() => void (busy = false))
  }, 10_000)
  return () => clearInterval(timer)
}

/** Runs the whole thing; the caller prints the report and runs the cleanup. */
export const run = async (
  options: Options,
  signal: AbortSignal,
  cleanup: Cleanup
): Promise<{ result: Report.RunResult; verdict: Report.Verdict }> => {
  const started = Date.now()
  const random = Random.make(options.seed)
  const runDir = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-chaos-"))
  const removeDir = () => fs.rmSync(runDir, { recursive: true, force: true })
  cleanup.add("remove the run's temp folder", async () => removeDir(), removeDir)
  // As root, PostgreSQL runs as the postgres user, which must reach its data directory in here.
  fs.chmodSync(runDir, 0o755)
  fs.mkdirSync(path.join(runDir, "pg"))
  const logDir = options.keepLogs ?? path.join(runDir, "logs")
  fs.mkdirSync(logDir, { recursive: true })
  log(
    `${
      options.quick ? "quick" : "full"
    } run, seed ${options.seed}: ${options.faultSeconds} s of faults at ${options.rate} transactions/s; run folder ${runDir}`
  )

  log("starting PostgreSQL (embedded) and RabbitMQ (private node) ...")
  const { cluster, broker } = await startServers(runDir, cleanup)
  const sql = Db.connect(cluster.url)
  cleanup.add("close the harness's database connections", () => sql.end({ timeout: 5 }))
  await Db.setUp(cluster.url, sql)
  await Amqp.declare(broker.url)
  log(
    `PostgreSQL on port ${cluster.port} and RabbitMQ at ${new URL(broker.url).host} ready, tables and topology declared`
  )

  const specs = Roster.make(options, cluster.url, broker.url)
  const plan = Plan.make(options, random, specs)
  log(
    `fault plan (seed ${options.seed}):\n${
      plan.map((f) => `    #${f.index} at +${(f.atMs / 1000).toFixed(1)}s of the fault phase: ${Plan.describe(f)}`)
        .join("\n")
    }`
  )

  const fleet = new Fleet(specs, { runtime: options.runtime, logDir, restartDelayMs: 1000, termGraceMs: 60_000 })
  cleanup.add("stop the workers", () => fleet.shutdown(), () => fleet.killAllNow())
  fleet.start()
  await fleet.waitReady(signal, 180_000)
  const setupMs = Date.now() - started
  const loadStartedAt = Date.now()
  log(`${specs.length} workers ready (${specs.map((s) => s.name).join(", ")}) after ${seconds(setupMs)}; load running`)

  const injector = new Injector({ fleet, cluster, broker, sql, random }, signal)
  const stopProgress = progress(sql, broker.url, fleet, injector)
  cleanup.add("stop the progress log", async () => stopProgress())
  await sleep(options.warmupSeconds * 1000, signal)
  log("fault phase")
  await injector.run(plan, Date.now())
  // The load ends with the last fault's start; the drain is measured once both that and the faults are over.
  for (const name of fleet.names("producer")) fleet.command(name, "stop-producing")
  const loadStoppedAt = Date.now()
  log("load stopped; waiting for the faults still running to end")
  const lastFaultEnd = Math.max(await injector.settle(), loadStoppedAt)
  log("every fault is over: draining")
  const drain = await Drain.waitForDrain(sql, broker.url, lastFaultEnd, options, signal)
  log(drain.drained ? `drained ${seconds(drain.drainMs)} after the last fault` : `gave up draining: ${drain.reason}`)
  stopProgress()

  log("stopping the workers (SIGTERM)")
  await fleet.shutdown()
  log("checking")
  const findings = await Verify.run(sql, broker.url, injector.malformedIds)
  const result: Report.RunResult = {
    options,
    setupMs,
    loadStartedAt,
    loadStoppedAt,
    lastFaultEnd,
    plan,
    faults: injector.records,
    exits: fleet.exits,
    starts: fleet.starts(),
    drain,
    findings,
    shutdownTimeoutMs: SHUTDOWN_TIMEOUT_MS,
    instances: fleet.describeInstances((t) => `+${elapsed(t)}s`)
  }
  return { result, verdict: Report.verdict(result) }
}
