/**
 * The chaos harness (`chaos/`): its fault plan and verdict rules, and `npm run chaos -- --quick`
 * itself, run to completion with its workers on the runtime of this test run (Node or Deno) and
 * checked through its exit code and JSON report: nothing lost, no phantom, no duplicate effect, no
 * crashed process, every malformed message dead-lettered, drained.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { type Fault, kinds, make as makePlan } from "../chaos/src/faults/plan.ts"
import * as Malformed from "../chaos/src/malformed.ts"
import * as Options from "../chaos/src/options.ts"
import * as Random from "../chaos/src/random.ts"
import { crashSignature, type RunResult, verdict } from "../chaos/src/report.ts"
import { currentRuntime, exited, spawnOn } from "./support/processes.ts"

const workers = [
  { name: "producer-1", role: "producer" as const },
  { name: "producer-2", role: "producer" as const },
  { name: "relay-1", role: "relay" as const },
  { name: "relay-2", role: "relay" as const },
  { name: "consumer-1", role: "consumer" as const },
  { name: "consumer-2", role: "consumer" as const }
]

const options = (argv: ReadonlyArray<string>): Options.Options => {
  const parsed = Options.parse(argv)
  if (parsed === "help") throw new Error("help")
  return parsed
}

describe("chaos fault plan", () => {
  it("is the same for the same seed, has every kind at least once and the PostgreSQL restart once", () => {
    for (const seed of [1, 42, 2024, 99_999]) {
      const o = options(["--quick", "--seed", String(seed)])
      const plan = makePlan(o, Random.make(seed), workers)
      assert.deepStrictEqual(makePlan(o, Random.make(seed), workers), plan)
      for (const kind of kinds) {
        assert.isAtLeast(plan.filter((f) => f.kind === kind).length, 1, `${kind} with seed ${seed}`)
      }
      assert.strictEqual(plan.filter((f) => f.kind === "pg-restart").length, 1)
      const gaps = plan.map((f, i) => f.atMs - (i === 0 ? 0 : plan[i - 1]!.atMs))
      assert.isTrue(gaps.every((g) => g >= 2000 && g <= 6000), `gaps ${gaps.join(",")}`)
      assert.isTrue(plan.every((f) => f.atMs < o.faultSeconds * 1000))
      // SIGSTOP pauses outlast the relays' lease; process faults hit every role.
      for (const f of plan.filter((x) => x.kind === "sigstop")) assert.isAbove(f.durationMs!, o.leaseSeconds * 1000)
      const roles = new Set(
        plan.filter((f) => ["sigkill", "sigterm", "sigstop"].includes(f.kind)).map((f) => f.target!.split("-")[0])
      )
      assert.deepStrictEqual([...roles].sort(), ["consumer", "producer", "relay"])
    }
  })

  it("the full run: 10 minutes of faults every 2-6 s at 100 transactions/s", () => {
    const o = options(["--seed", "5"])
    assert.strictEqual(o.faultSeconds, 600)
    assert.strictEqual(o.rate, 100)
    assert.isTrue(o.strict)
    const plan: ReadonlyArray<Fault> = makePlan(o, Random.make(5), workers)
    assert.isAtLeast(plan.length, 100)
    assert.throws(() => Options.parse(["--rate", "x"]), /--rate must be a number/)
    assert.throws(() => Options.parse(["--runtime", "bun"]), /--runtime must be node or deno/)
  })

  it("names the malformed messages by kind", () => {
    assert.strictEqual(Malformed.kindOf("malformed-version-3"), "version")
    assert.strictEqual(Malformed.kindOf("malformed-json-1"), "json")
    assert.strictEqual(Malformed.kindOf("0190b2c4-0000-7000-8000-000000000000"), undefined)
  })
})

describe("chaos verdict", () => {
  const clean = (strict: boolean, overrides: Partial<RunResult> = {}): RunResult => ({
    options: { ...options(strict ? [] : ["--quick"]), strict },
    setupMs: 1,
    loadStartedAt: 0,
    loadStoppedAt: 1,
    lastFaultEnd: 1,
    plan: [],
    faults: [],
    exits: [],
    starts: {},
    drain: {
      drained: true,
      drainMs: 40_000,
      reason: undefined,
      last: {
        committed: 1,
        unsettled: 0,
        published: 1,
        failed: 0,
        missing: 0,
        effects: 1,
        queued: 0,
        nextDueAt: undefined
      }
    },
    findings: {
      committed: 10,
      rolledBack: 1,
      outbox: { published: 9, failed: 1 },
      failedReasons: [],
      retried: { count: 0, maxAttempts: 1, reasons: [] },
      effects: { rows: 9, messages: 9 },
      lost: { count: 0, events: [] },
      failedRows: { count: 1, events: [] },
      phantom: { count: 0, events: [] },
      duplicates: { count: 0, extraEffects: 0, messages: [] },
      inbox: { byStatus: {}, failed: [] },
      published: { copies: 9, events: 9, republished: 0, auditComplete: true },
      malformed: { published: 3, deadLettered: 3, handled: [], vanished: [] },
      deadLetters: { total: 3, unexpected: [] }
    },
    shutdownTimeoutMs: 10_000,
    instances: {},
    ...overrides
  })

  it("a failed row, a 40 s drain and a slow shutdown fail only the full run", () => {
    const slow = {
      name: "relay-2",
      role: "relay" as const,
      incarnation: 1,
      pid: 1,
      code: 0,
      signal: null,
      at: 0,
      uptimeMs: 1,
      sent: "SIGTERM" as const,
      crashed: false,
      ready: true,
      shutdownMs: 11_500,
      hung: false,
      how: "exit code 0",
      tail: []
    }
    assert.isTrue(verdict(clean(false, { exits: [slow] })).passed)
    assert.deepStrictEqual(verdict(clean(true, { exits: [slow] })).failures, [
      "1 outbox rows failed (need a manual retry)",
      "drained 40.00 s after the last fault (budget 30 s)",
      "1 processes took longer than shutdownTimeout + 1 s to exit after SIGTERM: relay-2 11.50 s"
    ])
  })

  it("a worker that gave up starting after startupTimeout is a crash unless the broker was down at its last attempt", () => {
    const outage = {
      fault: { index: 1, kind: "broker-outage" as const, atMs: 0, durationMs: 20_000 },
      target: undefined,
      startedAt: 10_000,
      endedAt: 60_000,
      outcome: "done" as const,
      detail: ""
    }
    const exit = (at: number, line = "AmqpConnectionError: connect ECONNREFUSED 127.0.0.1:5672") => ({
      name: "relay-1",
      role: "relay" as const,
      incarnation: 3,
      pid: 1,
      code: 1,
      signal: null,
      at,
      uptimeMs: 33_000,
      sent: undefined,
      crashed: true,
      ready: false,
      shutdownMs: undefined,
      hung: false,
      how: "exit code 1",
      tail: ["[relay-1] failed:", line]
    })
    assert.isTrue(verdict(clean(false, { faults: [outage], exits: [exit(45_000)] })).passed)
    // the broker was back: the worker should have connected
    assert.deepStrictEqual(verdict(clean(false, { faults: [outage], exits: [exit(90_000)] })).failures, [
      "1 processes crashed: 1 × exit code 1 | AmqpConnectionError: connect ECONNREFUSED 127.0.0.1:5672"
    ])
    // another error during the outage is a crash
    assert.isFalse(verdict(clean(false, { faults: [outage], exits: [exit(45_000, "TypeError: boom")] })).passed)
    // a worker that had been ready and then died of the outage is a crash
    assert.isFalse(verdict(clean(false, { faults: [outage], exits: [{ ...exit(45_000), ready: true }] })).passed)
  })

  it("a crash, a lost event or a handled malformed message fails any run", () => {
    const crash = {
      name: "relay-1",
      role: "relay" as const,
      incarnation: 0,
      pid: 1,
      code: 1,
      signal: null,
      at: 0,
      uptimeMs: 1,
      sent: undefined,
      crashed: true,
      ready: true,
      shutdownMs: undefined,
      hung: false,
      how: "exit code 1",
      tail: []
    }
    const r = clean(false, { exits: [crash] })
    assert.deepStrictEqual(verdict(r).failures, ["1 processes crashed: 1 × exit code 1"])
    const lost = clean(false)
    const findings = {
      ...lost.findings,
      lost: { count: 2, events: [] },
      malformed: { ...lost.findings.malformed, handled: ["malformed-version-1"] }
    }
    assert.deepStrictEqual(verdict({ ...lost, findings }).failures, [
      "2 committed events lost (no effect, not failed in the outbox)",
      "1 malformed messages were handled as valid: malformed-version-1"
    ])
  })
})

describe("chaos crash evidence", () => {
  it("names a crash by its exit, error line and code, from the fatal banner on", () => {
    const tail = [
      "[12:00:00.000] WARN (#1): transaction failed (3 so far): PgClient: read ECONNRESET",
      "node:internal/process/promises:394",
      "    triggerUncaughtException(err, true /* fromPromise */);",
      "    ^",
      "",
      "PostgresError: terminating connection due to administrator command",
      "    at ErrorResponse (file:///x/connection.js:815:30) {",
      "  severity: 'FATAL',",
      "  code: '57P01',",
      "}"
    ]
    const exit = {
      name: "relay-1",
      role: "relay" as const,
      incarnation: 0,
      pid: 1,
      code: 1,
      signal: null,
      at: 0,
      uptimeMs: 1,
      sent: undefined,
      crashed: true,
      ready: true,
      shutdownMs: undefined,
      hung: false,
      how: "exit code 1",
      tail
    }
    assert.strictEqual(
      crashSignature(exit),
      "exit code 1 | PostgresError: terminating connection due to administrator command | code: '57P01'"
    )
  })

  it("reads Deno's fatal errors too", () => {
    const exit = {
      name: "consumer-1",
      role: "consumer" as const,
      incarnation: 2,
      pid: 1,
      code: 1,
      signal: null,
      at: 0,
      uptimeMs: 1,
      sent: undefined,
      crashed: true,
      ready: true,
      shutdownMs: undefined,
      hung: false,
      how: "exit code 1",
      tail: [
        "ready",
        "error: Uncaught (in promise) Error: read ECONNRESET",
        "    at TCPWrap.onStreamRead (ext:deno_node/internal/stream_base_commons.ts:1:1)"
      ]
    }
    assert.strictEqual(crashSignature(exit), "exit code 1 | error: Uncaught (in promise) Error: read ECONNRESET")
  })
})

describe("npm run chaos -- --quick", () => {
  it(
    "real producer, relay and consumer processes under faults: nothing lost, no phantom, no duplicate effect, no crash",
    async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-chaos-test-"))
      try {
        const reportFile = path.join(dir, "report.json")
        const main = path.join(import.meta.dirname, "..", "chaos", "src", "main.ts")
        // The harness runs on Node (it drives servers and processes); its workers on this run's runtime.
        const child = spawnOn("node", main, ["--quick", "--runtime", currentRuntime(), "--report", reportFile], {})
        const code = await exited(child)
        const output = child.output()
        // The report (stdout) when there is one, else the end of the log, to explain a failure.
        const start = output.indexOf("== Tidings chaos report")
        const tail = (start >= 0 ? output.slice(start) : output).split("\n").slice(start >= 0 ? 0 : -150).join("\n")
        assert.isTrue(fs.existsSync(reportFile), `no report (exit ${code}):\n${tail}`)
        const report = JSON.parse(fs.readFileSync(reportFile, "utf8")) as {
          verdict: { passed: boolean; failures: Array<string> }
          findings: { committed: number; malformed: { published: number } }
          faults: Array<{ fault: { kind: string }; outcome: string }>
        }
        // The run did what it is for: load, every kind of fault, malformed messages.
        assert.isAbove(report.findings.committed, 1000)
        for (const kind of kinds) {
          assert.isTrue(
            report.faults.some((f) => f.fault.kind === kind && f.outcome === "done"),
            `no ${kind} fault carried out`
          )
        }
        assert.isAbove(report.findings.malformed.published, 0)
        // Exit code and verdict agree, and the verdict is a pass.
        assert.strictEqual(code, report.verdict.passed ? 0 : 1, tail)
        assert.deepStrictEqual(report.verdict.failures, [], tail)
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    },
    30 * 60_000
  )
})
