/**
 * The harness's progress log: one line per event on stderr, stamped with the seconds since the run
 * started, so a report's times and the log line up. The report itself goes to stdout.
 * @module
 */

const started = Date.now()

/** Seconds since the harness started, e.g. `12.3`. */
export const elapsed = (at: number = Date.now()): string => ((at - started) / 1000).toFixed(1)

/** Writes `[chaos +12.3s] message` to stderr. */
export const log = (message: string): void => {
  process.stderr.write(`[chaos +${elapsed()}s] ${message}\n`)
}

/** Milliseconds as `1.23 s` (or `456 ms` below a second). */
export const seconds = (ms: number): string => ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`
