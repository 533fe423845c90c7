/**
 * How a worker process lives, the same for producers, relays and consumers:
 * - its program runs in a scope; SIGTERM or SIGINT interrupts it (graceful shutdown through the
 *   layers' finalizers) and the process exits 0 once that is done;
 * - the program failing exits 1 with the cause on stderr (the harness reports it as a crash);
 * - standard input carries the harness's commands, one per line (`stop-producing`); its end means
 *   the harness is gone, and the worker shuts down instead of living on as an orphan;
 * - `ready` prints `ready` on stdout, which the harness waits for.
 * @module
 */
import { Cause, Effect, Exit, Fiber, References } from "effect"
import * as readline from "node:readline"

/** What the program gets from its process. */
export interface Control {
  /** Tells the harness the worker is up (prints `ready`). */
  readonly ready: Effect.Effect<void>
  /** Completes when the harness sends `command`. */
  readonly command: (command: string) => Effect.Effect<void>
}

/** Reads a required environment variable. */
export const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined || value === "") throw new Error(`missing environment variable ${name}`)
  return value
}

/**
 * Runs `program` as this process's life (see the module docs). Never returns. The program closes its
 * own scope inside the layers it provides (`Effect.scoped` before `Effect.provide`): a scope closed
 * outside them would shut the database client and broker connection down before the relay or
 * consumer built in it, which then could not settle or release what it holds.
 */
export const run = <E>(name: string, program: (control: Control) => Effect.Effect<unknown, E>): void => {
  const waiting = new Map<string, { promise: Promise<void>; resolve: () => void }>()
  const slot = (command: string) => {
    let entry = waiting.get(command)
    if (entry === undefined) {
      let resolve!: () => void
      const promise = new Promise<void>((r) => (resolve = r))
      entry = { promise, resolve }
      waiting.set(command, entry)
    }
    return entry
  }
  const control: Control = {
    ready: Effect.sync(() => void process.stdout.write("ready\n")),
    command: (command) => Effect.promise(() => slot(command).promise)
  }
  const fiber = Effect.runFork(
    program(control).pipe(Effect.provideService(References.LogToStderr, true))
  )
  let stopping: string | undefined
  const stop = (why: string) => {
    if (stopping !== undefined) return
    stopping = why
    process.stderr.write(`[${name}] ${why}: shutting down\n`)
    Effect.runFork(Fiber.interrupt(fiber))
  }
  process.on("SIGTERM", () => stop("SIGTERM"))
  process.on("SIGINT", () => stop("SIGINT"))
  const lines = readline.createInterface({ input: process.stdin })
  lines.on("line", (line) => slot(line.trim()).resolve())
  lines.on("close", () => stop("standard input closed (harness gone)"))
  Effect.runPromise(Fiber.await(fiber)).then((exit) => {
    if (Exit.isSuccess(exit)) {
      process.stderr.write(`[${name}] program ended by itself\n`)
      process.exit(stopping === undefined ? 3 : 0)
    }
    if (Cause.hasInterruptsOnly(exit.cause) && stopping !== undefined) {
      process.stderr.write(`[${name}] stopped (${stopping})\n`)
      process.exit(0)
    }
    process.stderr.write(`[${name}] failed:\n${Cause.pretty(exit.cause)}\n`)
    process.exit(1)
  })
}
