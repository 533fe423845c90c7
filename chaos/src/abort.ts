/**
 * Interruptible waiting for the harness: every wait takes the run's `AbortSignal`, so a Ctrl-C ends
 * whatever phase is running and the cleanup starts at once.
 * @module
 */

/** Thrown by waits when the run was interrupted. */
export class Interrupted extends Error {
  constructor() {
    super("interrupted")
  }
}

/** Resolves after `ms`, or rejects with {@link Interrupted} as soon as `signal` aborts. */
export const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new Interrupted())
    const onAbort = () => {
      clearTimeout(timer)
      reject(new Interrupted())
    }
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort)
      resolve()
    }, Math.max(0, ms))
    signal.addEventListener("abort", onAbort, { once: true })
  })

/** Throws {@link Interrupted} when `signal` has aborted. */
export const check = (signal: AbortSignal): void => {
  if (signal.aborted) throw new Interrupted()
}
