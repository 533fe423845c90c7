/**
 * `Main.runMain` as the main entry of a real child process, on Node, Deno and Bun: SIGTERM and
 * SIGINT interrupt the program, its finalizers run, and the process exits 0; a second signal during
 * a finalizer that never ends exits at once with 130; a program that ends exits 0 even with a timer
 * left behind; a failure is reported and exits 1.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import * as path from "node:path"
import { exited, waitForOutput } from "../../../test/support/processes.ts"
import { command, runtimes } from "../../../test/support/runtimes.ts"

const fixture = path.join(import.meta.dirname, "fixtures/main.ts")

const start = (runtime: (typeof runtimes)[number], mode: string) => {
  const [cmd, args] = command(runtime)
  const child = spawn(cmd, [...args, fixture, mode], { stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  child.stdout.on("data", (d: Buffer) => void (output += d.toString()))
  child.stderr.on("data", (d: Buffer) => void (output += d.toString()))
  return Object.assign(child, { output: () => output })
}

describe.each(runtimes)("Main.runMain on %s", (runtime) => {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    it(`${signal}: interrupts the program, runs its finalizers, exits 0`, async () => {
      const child = start(runtime, "serve")
      await waitForOutput(child, "ready")
      process.kill(child.pid!, signal) // not child.kill: Deno's child_process then reports the signal instead of the exit code
      const code = await exited(child)
      const lines = child.output().trim().split("\n")
      assert.strictEqual(code, 0, child.output())
      assert.deepStrictEqual(lines, ["acquired", "ready", "worker interrupted", "released"], child.output())
    })
  }

  it("a second signal while a finalizer hangs exits at once with 130", async () => {
    const child = start(runtime, "stubborn")
    await waitForOutput(child, "ready")
    process.kill(child.pid!, "SIGTERM")
    await waitForOutput(child, "finalizer started")
    process.kill(child.pid!, "SIGTERM")
    assert.strictEqual(await exited(child), 130, child.output())
  })

  it("a program that ends exits 0, although a timer is left behind", async () => {
    const child = start(runtime, "succeed")
    assert.strictEqual(await exited(child), 0, child.output())
    assert.strictEqual(child.output().trim(), "done")
  })

  it("a failure is reported and exits 1", async () => {
    const child = start(runtime, "fail")
    assert.strictEqual(await exited(child), 1, child.output())
    assert.include(child.output(), "Boom")
    assert.include(child.output(), "on purpose")
  })
})
