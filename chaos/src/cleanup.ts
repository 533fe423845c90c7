/**
 * Everything a run started, undone in reverse order: workers, the harness's connections, the
 * broker, PostgreSQL, the temp folder. `runAll` is the orderly way (end of run, error, Ctrl-C);
 * `runNow` is the synchronous last resort from an `exit` handler or a second Ctrl-C (SIGKILL the
 * workers, immediate shutdown of PostgreSQL, remove the folder; the broker support module kills
 * its node on exit by itself).
 * @module
 */
import { log } from "./log.ts"

interface Step {
  readonly name: string
  readonly run: () => Promise<void>
  readonly now: (() => void) | undefined
}

export class Cleanup {
  readonly #steps: Array<Step> = []
  #ran = false

  /** Registers a step; `now` is its synchronous last-resort form. */
  add(name: string, run: () => Promise<void>, now?: () => void): void {
    this.#steps.push({ name, run, now })
  }

  /** Runs every step once, newest first; a failing step is logged and the rest still run. */
  async runAll(): Promise<void> {
    if (this.#ran) return
    this.#ran = true
    for (const step of [...this.#steps].reverse()) {
      try {
        await step.run()
      } catch (error) {
        log(`cleanup: ${step.name} failed: ${error instanceof Error ? error.message : String(error)}`)
        try {
          step.now?.()
        } catch {
          // nothing more to do
        }
      }
    }
    this.#steps.length = 0
  }

  /** The synchronous last resorts of the steps not run yet. */
  runNow(): void {
    for (const step of [...this.#steps].reverse()) {
      try {
        step.now?.()
      } catch {
        // keep going
      }
    }
    this.#steps.length = 0
  }
}
