#!/usr/bin/env node
/**
 * The `tidings` executable: runs the command with the process's arguments and exits with its code;
 * SIGINT and SIGTERM interrupt it (a relay worker then shuts down gracefully and exits 0).
 * @module
 */
import { Cause, Effect, Exit, Fiber } from "effect"
import * as Cli from "./Cli.ts"

let signalled = false
const fiber = Effect.runFork(Cli.run(process.argv.slice(2)))
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    signalled = true
    Effect.runFork(Fiber.interrupt(fiber))
  })
}
fiber.addObserver((exit) => {
  process.exitCode = Exit.isSuccess(exit) ? exit.value : signalled && Cause.hasInterruptsOnly(exit.cause) ? 0 : 1
  // Pools and sockets are closed by now, so the process ends by itself once its output is written;
  // should anything still hold it, it exits anyway (the timer does not keep it alive).
  setTimeout(() => process.exit(), 2000).unref()
})
