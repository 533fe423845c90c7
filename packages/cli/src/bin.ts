#!/usr/bin/env node
/**
 * The `tidings` executable: runs the command with the process's arguments and exits with its code;
 * SIGINT and SIGTERM interrupt it (a relay worker then shuts down gracefully and exits 0).
 * @module
 */
import { Effect, Fiber } from "effect"
import * as Cli from "./Cli.ts"

const fiber = Effect.runFork(Cli.run(process.argv.slice(2)))
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => void Effect.runFork(Fiber.interrupt(fiber)))
}
fiber.addObserver((exit) => {
  process.exitCode = exit._tag === "Success" ? exit.value : 1
  // Pools and sockets are closed by now; nothing should keep the process alive.
  setTimeout(() => process.exit(process.exitCode), 50).unref()
})
