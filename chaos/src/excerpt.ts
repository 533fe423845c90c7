/**
 * The lines of a dead process's output that explain it: from where the fatal error starts (Node's
 * uncaught-exception banner, Deno's `Uncaught`, the worker's own `failed:`), else the last lines.
 * @module
 */

const fatal = /triggerUncaughtException|^error: Uncaught|^Uncaught|\] failed:$/

/** At most `max` lines of `tail`, starting just before its last fatal-error marker. */
export const excerpt = (tail: ReadonlyArray<string>, max = 16): ReadonlyArray<string> => {
  for (let i = tail.length - 1; i >= 0; i--) {
    if (fatal.test(tail[i]!)) return tail.slice(Math.max(0, i - 1), Math.max(0, i - 1) + max)
  }
  return tail.slice(-max)
}
