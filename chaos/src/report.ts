/**
 * The run's verdict and report. The verdict fails on any lost event, phantom, duplicate effect,
 * crashed or hung process, malformed message that was not dead-lettered, or a drain that did not
 * finish; the full run (strict) also on failed outbox rows, a drain slower than its budget and a
 * SIGTERM exit slower than the shutdown timeout + 1 s. The
 * text report leads with those numbers and then gives, for each failure, the evidence: the crashed
 * process's last output lines, each lost event's outbox and inbox rows, each duplicate's effects.
 * @module
 */
import type { DrainResult } from "./drain.ts"
import { summary } from "./drain.ts"
import { excerpt } from "./excerpt.ts"
import type { FaultRecord } from "./faults/inject.ts"
import { describe, type Fault, kinds } from "./faults/plan.ts"
import type { ExitRecord } from "./fleet.ts"
import { elapsed, seconds } from "./log.ts"
import type { Options } from "./options.ts"
import type { Findings, LostEvent } from "./verify.ts"

/** Everything a run produced. */
export interface RunResult {
  readonly options: Options
  readonly setupMs: number
  /** Epoch ms. */
  readonly loadStartedAt: number
  readonly loadStoppedAt: number
  readonly lastFaultEnd: number
  readonly plan: ReadonlyArray<Fault>
  readonly faults: ReadonlyArray<FaultRecord>
  readonly exits: ReadonlyArray<ExitRecord>
  readonly starts: Readonly<Record<string, number>>
  readonly drain: DrainResult
  readonly findings: Findings
  /** The workers' shutdown timeout (the library default); a SIGTERM exit past it + 1 s is slow. */
  readonly shutdownTimeoutMs: number
  /** Inbox instance ids (`started_by`) → the consumer incarnation they were, and how it ended. */
  readonly instances: Readonly<Record<string, string>>
}

/** Pass or fail, and why. */
export interface Verdict {
  readonly passed: boolean
  readonly failures: ReadonlyArray<string>
}

/** The broker connection's `startupTimeout` (the library default, which the workers keep). */
const STARTUP_TIMEOUT_MS = 30_000

/** Whether a broker outage of the run was in effect at `at` (epoch ms), or ended less than `slackMs` before. */
const brokerDownAt = (r: RunResult, at: number, slackMs: number) =>
  r.faults.some((x) =>
    x.fault.kind === "broker-outage" && x.outcome !== "skipped" && x.startedAt <= at &&
    (x.endedAt ?? Infinity) >= at - slackMs
  )

/**
 * A worker that gave up starting as documented: building `AmqpConnection.layer` retries a refused
 * first connection for `startupTimeout` (30 s) and then fails, and the service manager starts it
 * again. Only when the broker really was down at its last attempt (a broker outage of the run), the
 * process never got ready, exited with code 1 by itself after at least the startup timeout, and its
 * error is the refused connection; anything else is a crash.
 */
export const gaveUpStarting = (r: RunResult, e: ExitRecord): boolean =>
  e.crashed && !e.ready && e.sent === undefined && e.code === 1 && e.uptimeMs >= STARTUP_TIMEOUT_MS &&
  e.tail.some((l) => /AmqpConnectionError: connect ECONNREFUSED/.test(l)) && brokerDownAt(r, e.at, 1500)

const crashes = (r: RunResult) => r.exits.filter((e) => e.crashed && !gaveUpStarting(r, e))
const startupsGivenUp = (r: RunResult) => r.exits.filter((e) => gaveUpStarting(r, e))
const hung = (r: RunResult) => r.exits.filter((e) => e.hung)
const slowShutdowns = (r: RunResult) =>
  r.exits.filter((e) => e.shutdownMs !== undefined && e.shutdownMs > r.shutdownTimeoutMs + 1000)

/** Applies the pass criteria. */
export const verdict = (r: RunResult): Verdict => {
  const f = r.findings
  const failures: Array<string> = []
  if (f.lost.count > 0) failures.push(`${f.lost.count} committed events lost (no effect, not failed in the outbox)`)
  if (f.phantom.count > 0) {
    failures.push(`${f.phantom.count} phantom events (published or handled without a committed transaction)`)
  }
  if (f.duplicates.count > 0) {
    failures.push(
      `${f.duplicates.count} events had their effect more than once (${f.duplicates.extraEffects} extra effects)`
    )
  }
  if (crashes(r).length > 0) {
    const byCause = new Map<string, number>()
    for (const e of crashes(r)) byCause.set(crashSignature(e), (byCause.get(crashSignature(e)) ?? 0) + 1)
    failures.push(
      `${crashes(r).length} processes crashed: ${[...byCause].map(([cause, n]) => `${n} × ${cause}`).join("; ")}`
    )
  }
  if (hung(r).length > 0) {
    failures.push(`${hung(r).length} processes did not exit after SIGTERM: ${hung(r).map((e) => e.name).join(", ")}`)
  }
  if (f.malformed.handled.length > 0) {
    failures.push(
      `${f.malformed.handled.length} malformed messages were handled as valid: ${f.malformed.handled.join(", ")}`
    )
  }
  if (f.malformed.vanished.length > 0) {
    failures.push(
      `${f.malformed.vanished.length} malformed messages were neither dead-lettered nor handled: ${
        f.malformed.vanished.join(", ")
      }`
    )
  }
  if (!f.published.auditComplete) {
    failures.push("the audit, dead-letter, work or retry queues could not be read out completely (checks incomplete)")
  }
  if (!r.drain.drained) failures.push(`did not drain: ${r.drain.reason}`)
  if (r.options.strict) {
    if (f.failedRows.count > 0) failures.push(`${f.failedRows.count} outbox rows failed (need a manual retry)`)
    if (r.drain.drained && r.drain.drainMs > r.options.drainBudgetSeconds * 1000) {
      failures.push(
        `drained ${seconds(r.drain.drainMs)} after the last fault (budget ${r.options.drainBudgetSeconds} s)`
      )
    }
    if (slowShutdowns(r).length > 0) {
      failures.push(
        `${slowShutdowns(r).length} processes took longer than shutdownTimeout + 1 s to exit after SIGTERM: ${
          slowShutdowns(r).map((e) => `${e.name} ${seconds(e.shutdownMs ?? 0)}`).join(", ")
        }`
      )
    }
  }
  return { passed: failures.length === 0, failures }
}

/** `exit code 1 | PostgresError: terminating connection ... | code: '57P01'`: what a crash was. */
export const crashSignature = (e: ExitRecord): string => {
  if (e.hung) return "hung after SIGTERM"
  const lines = excerpt(e.tail)
  const error = lines.find((l) => /^\s*([\w/.]*Error\b|error: Uncaught)/.test(l))?.trim()
  const code = lines.find((l) => /^\s*code: /.test(l))?.trim().replace(/,$/, "")
  return [e.how, error?.slice(0, 160), code].filter((x) => x !== undefined).join(" | ")
}

const at = (epochMs: number) => `+${elapsed(epochMs)}s`

const indent = (lines: ReadonlyArray<string>, prefix = "      ") => lines.map((l) => `${prefix}${l}`).join("\n")

const lostLine = (instances: Readonly<Record<string, string>>) => (e: LostEvent): string => {
  const o = e.outbox
  const outbox = o === null
    ? "NO outbox row"
    : `outbox ${o.status} (attempts ${o.attempts}, finished ${o.finishedAttempts}${
      o.claimedBy === null ? "" : `, claimed by ${o.claimedBy}`
    }${o.publishedAt === null ? "" : `, published ${o.publishedAt}`}${
      o.lastError === null ? "" : `, last error: ${o.lastError.slice(0, 200)}`
    })`
  const startedBy = e.inbox?.startedBy == null
    ? ""
    : `, last started by ${instances[e.inbox.startedBy] ?? e.inbox.startedBy}`
  const inbox = e.inbox === null
    ? "no inbox row"
    : `inbox ${e.inbox.status} (attempts ${e.inbox.attempts}, crashes ${e.inbox.crashes}${startedBy}${
      e.inbox.lastError === null ? "" : `, last error: ${e.inbox.lastError.slice(0, 200)}`
    })`
  const where = e.deadLetter !== undefined
    ? `dead-lettered (${e.deadLetter})`
    : e.stillQueued.length > 0
    ? `still queued in ${e.stillQueued.join(", ")}`
    : "in no queue and not dead-lettered"
  return `${e.orderId} event ${e.eventId} committed ${e.committedAt}: ${outbox}; the broker confirmed ${e.publishedCopies} copies; ${inbox}; ${where}${
    e.effected ? "; its effect happened" : ""
  }`
}

/** The human-readable report. */
export const text = (r: RunResult, v: Verdict): string => {
  const f = r.findings
  const o = r.options
  const loadSeconds = (r.loadStoppedAt - r.loadStartedAt) / 1000
  const byKind = kinds.map((k) => `${k} ${r.faults.filter((x) => x.fault.kind === k && x.outcome === "done").length}`)
    .join(", ")
  const skipped = r.faults.filter((x) => x.outcome === "skipped").length
  const exitsAfterTerm = r.exits.filter((e) => e.shutdownMs !== undefined)
  const slowest = exitsAfterTerm.reduce<ExitRecord | undefined>(
    (a, e) => a === undefined || (e.shutdownMs ?? 0) > (a.shutdownMs ?? 0) ? e : a,
    undefined
  )
  const lines: Array<string> = []
  lines.push(`== Tidings chaos report: ${o.quick ? "quick" : "full"} run, seed ${o.seed}, workers on ${o.runtime} ==`)
  const rate = (f.committed + f.rolledBack) / Math.max(1, loadSeconds)
  lines.push(
    `load:      ${f.committed} transactions committed and ${f.rolledBack} rolled back on purpose after appending: ${
      rate.toFixed(1)
    }/s over ${loadSeconds.toFixed(0)} s (target ${o.rate}/s)`
  )
  lines.push(
    `faults:    ${r.faults.length - skipped} injected (${byKind}), ${skipped} skipped; the last ended at ${
      at(r.lastFaultEnd)
    }`
  )
  lines.push(
    `drain:     ${
      r.drain.drained
        ? `drained ${seconds(r.drain.drainMs)} after the last fault`
        : `NOT drained ${seconds(r.drain.drainMs)} after the last fault: ${r.drain.reason}`
    }`
  )
  lines.push(`           at the end: ${summary(r.drain.last)}`)
  lines.push("checks:")
  lines.push(`  lost (committed, no effect)              ${f.lost.count}`)
  lines.push(`  phantom (published/handled, not committed) ${f.phantom.count}`)
  lines.push(`  duplicate effects                        ${f.duplicates.count}`)
  lines.push(`  crashed processes                        ${crashes(r).length}`)
  lines.push(`  hung on SIGTERM                          ${hung(r).length}`)
  lines.push(
    `  failed outbox rows                       ${f.failedRows.count}${
      o.strict ? "" : " (reported; fails the full run only)"
    }`
  )
  lines.push(
    `  malformed messages dead-lettered         ${f.malformed.deadLettered} of ${f.malformed.published} (expected: all)`
  )
  lines.push(
    `  drain after the last fault               ${r.drain.drained ? seconds(r.drain.drainMs) : "not drained"}${
      o.strict ? ` (budget ${o.drainBudgetSeconds} s)` : ""
    }`
  )
  lines.push(
    `outbox:    ${
      Object.entries(f.outbox).map(([s, n]) => `${s} ${n}`).join(", ")
    }; the broker confirmed ${f.published.copies} copies of ${f.published.events} events (${f.published.republished} published more than once)`
  )
  lines.push(
    `attempts:  ${f.retried.count} events took more than one attempt (at most ${f.retried.maxAttempts})${
      f.retried.count === 0
        ? ""
        : `; by last error: ${f.retried.reasons.map((x) => `${x.count} × ${x.reason}`).join("; ")}`
    }`
  )
  lines.push(
    `effects:   ${f.effects.rows} rows for ${f.effects.messages} messages; inbox ${
      Object.entries(f.inbox.byStatus).map(([s, n]) => `${s} ${n}`).join(", ")
    }`
  )
  lines.push(
    `dead letters: ${f.deadLetters.total} (${f.malformed.deadLettered} malformed, ${f.deadLetters.unexpected.length} others)`
  )
  lines.push(`processes: ${Object.entries(r.starts).map(([n, s]) => `${n} started ${s}×`).join(", ")}`)
  if (startupsGivenUp(r).length > 0) {
    lines.push(
      `           ${startupsGivenUp(r).length} gave up starting after the broker connection's startupTimeout (${
        seconds(STARTUP_TIMEOUT_MS)
      }) while the broker was down, as documented, and were started again: ${
        startupsGivenUp(r).map((e) => `${e.name} #${e.incarnation} at ${at(e.at)}`).join(", ")
      }`
    )
  }
  lines.push(
    `           ${exitsAfterTerm.length} exits after SIGTERM, slowest ${
      slowest === undefined ? "-" : `${seconds(slowest.shutdownMs ?? 0)} (${slowest.name})`
    }; ${slowShutdowns(r).length} over shutdownTimeout + 1 s`
  )
  lines.push(`setup ${seconds(r.setupMs)}; fault plan (seed ${o.seed}):`)
  for (const x of r.faults) {
    lines.push(
      `  #${String(x.fault.index).padStart(3)} ${at(x.startedAt).padStart(8)} ${
        describe(x.fault, x.target)
      }: ${x.outcome}${x.detail === "" || x.detail === "sent" ? "" : ` (${x.detail})`}`
    )
  }

  if (crashes(r).length > 0 || hung(r).length > 0) {
    // Grouped by cause: a failure mode hit fifty times is one finding with fifty occurrences.
    const groups = new Map<string, Array<ExitRecord>>()
    for (const e of [...crashes(r), ...hung(r)]) {
      const key = crashSignature(e)
      groups.set(key, [...(groups.get(key) ?? []), e])
    }
    lines.push(`crashed / hung processes, by cause (${groups.size}):`)
    for (const [key, exits] of groups) {
      const e = exits[0]!
      lines.push(`  ${exits.length} × ${key}`)
      lines.push(
        `    ${
          exits.map((x) => `${x.name} #${x.incarnation} at ${at(x.at)}${x.ready ? "" : " (never ready)"}`).join(", ")
        }`
      )
      lines.push(
        `    first: ${e.name} #${e.incarnation} (pid ${e.pid}, ${e.role})${
          e.sent === undefined ? "" : ` after the harness's ${e.sent}`
        }, up ${seconds(e.uptimeMs)}; output:`
      )
      lines.push(indent(excerpt(e.tail)))
    }
  }
  if (slowShutdowns(r).length > 0) {
    lines.push(`slow shutdowns (over ${seconds(r.shutdownTimeoutMs + 1000)} after SIGTERM):`)
    for (const e of slowShutdowns(r)) {
      lines.push(`  ${e.name} #${e.incarnation}: ${seconds(e.shutdownMs ?? 0)} at ${at(e.at)}`)
    }
  }
  const show = <A>(title: string, items: ReadonlyArray<A>, total: number, line: (a: A) => string) => {
    if (total === 0) return
    lines.push(`${title} (${total}${items.length < total ? `, first ${items.length}` : ""}):`)
    for (const item of items.slice(0, 20)) lines.push(`  ${line(item)}`)
    if (Math.min(items.length, 20) < total) {
      lines.push(
        `  ... ${total - Math.min(items.length, 20)} more${o.reportFile === undefined ? "" : ` (see ${o.reportFile})`}`
      )
    }
  }
  show("lost events", f.lost.events, f.lost.count, lostLine(r.instances))
  show("failed outbox rows", f.failedRows.events, f.failedRows.count, lostLine(r.instances))
  if (f.failedReasons.length > 0) {
    lines.push("failed rows by last error:")
    for (const x of f.failedReasons) lines.push(`  ${x.count} × ${x.reason}`)
  }
  show(
    "phantom events",
    f.phantom.events,
    f.phantom.count,
    (p) =>
      `event ${p.eventId} order ${p.orderId ?? "?"}${p.rolledBack ? " (rolled back on purpose)" : ""}: found in ${
        p.where.join(", ")
      }`
  )
  show(
    "duplicate effects",
    f.duplicates.messages,
    f.duplicates.count,
    (d) =>
      `${d.orderId} message ${d.messageId}: ${
        d.effects.map((e) => `${e.consumer} pid ${e.pid} attempt ${e.attempt} at ${e.at}`).join("; ")
      }`
  )
  show(
    "unexpected dead letters",
    f.deadLetters.unexpected,
    f.deadLetters.unexpected.length,
    (d) => `${d.messageId ?? "?"} type ${d.type ?? "?"}: ${d.history}`
  )
  show("failed inbox rows", f.inbox.failed, f.inbox.failed.length, (x) => `${x.messageId}: ${x.lastError ?? ""}`)
  lines.push(v.passed ? "RESULT: PASS" : `RESULT: FAIL\n${indent(v.failures, "  - ")}`)
  return lines.join("\n")
}

/** The report as JSON (everything, with the verdict). */
export const json = (r: RunResult, v: Verdict): unknown => ({
  verdict: v,
  options: r.options,
  setupMs: r.setupMs,
  load: { startedAt: new Date(r.loadStartedAt).toISOString(), stoppedAt: new Date(r.loadStoppedAt).toISOString() },
  lastFaultEnd: new Date(r.lastFaultEnd).toISOString(),
  drain: r.drain,
  findings: r.findings,
  faults: r.faults.map((x) => ({
    ...x,
    description: describe(x.fault, x.target),
    startedAt: new Date(x.startedAt).toISOString()
  })),
  processes: {
    starts: r.starts,
    exits: r.exits,
    crashed: crashes(r),
    gaveUpStarting: startupsGivenUp(r),
    hung: hung(r),
    slowShutdowns: slowShutdowns(r),
    instances: r.instances
  }
})
