/**
 * Spawning TypeScript child processes on the runtime the tests run on: Node (type stripping) or Deno.
 */
import { type ChildProcess, spawn } from "node:child_process"

declare const Deno: { execPath(): string } | undefined

/** Starts `script` with the current runtime; stdout/stderr are collected. */
export const spawnScript = (script: string, env: Record<string, string>): ChildProcess & { output: () => string } => {
  const isDeno = typeof Deno !== "undefined"
  const [cmd, args] = isDeno ? [Deno!.execPath(), ["run", "-A", script]] : [process.execPath, [script]]
  const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  child.stdout?.on("data", (d: Buffer) => void (output += d.toString()))
  child.stderr?.on("data", (d: Buffer) => void (output += d.toString()))
  return Object.assign(child, { output: () => output })
}

/** Resolves with the exit code (or signal) once the child exits. */
export const exited = (child: ChildProcess): Promise<number | string> =>
  new Promise((resolve) => {
    if (child.exitCode !== null) return resolve(child.exitCode)
    child.once("exit", (code, signal) => resolve(code ?? signal ?? -1))
  })

/** Resolves when the child prints `text`; rejects if it exits first or `timeoutMs` passes. */
export const waitForOutput = (child: ChildProcess & { output: () => string }, text: string, timeoutMs = 20_000): Promise<void> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for "${text}"; output:\n${child.output()}`)), timeoutMs)
    const check = () => {
      if (child.output().includes(text)) {
        clearTimeout(timer)
        resolve()
      }
    }
    child.stdout?.on("data", check)
    child.once("exit", () => {
      clearTimeout(timer)
      if (!child.output().includes(text)) reject(new Error(`exited before "${text}"; output:\n${child.output()}`))
    })
    check()
  })

/**
 * Runs an example script to completion against the test servers (killed after `timeoutMs`) and
 * returns its exit code and output.
 */
export const runExample = async (script: string, env: Record<string, string>, timeoutMs = 60_000) => {
  const child = spawnScript(script, env)
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
  try {
    const code = await exited(child)
    return { code, output: child.output() }
  } finally {
    clearTimeout(timer)
  }
}

/** A runtime to run a TypeScript script on. */
export type ScriptRuntime = "node" | "deno"

/** The runtime the tests run on. */
export const currentRuntime = (): ScriptRuntime => typeof Deno !== "undefined" ? "deno" : "node"

/**
 * Starts `script` with `args` on `runtime` (default: the one the tests run on); stdout/stderr are
 * collected. Node runs TypeScript by type stripping; Deno with `run -A`.
 */
export const spawnOn = (
  runtime: ScriptRuntime,
  script: string,
  args: ReadonlyArray<string>,
  env: Record<string, string>
): ChildProcess & { output: () => string } => {
  const [cmd, runtimeArgs] = runtime === "deno"
    ? [typeof Deno !== "undefined" ? Deno.execPath() : "deno", ["run", "-A", script]]
    : [typeof Deno !== "undefined" ? "node" : process.execPath, [script]]
  const child = spawn(cmd, [...runtimeArgs, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  child.stdout?.on("data", (d: Buffer) => void (output += d.toString()))
  child.stderr?.on("data", (d: Buffer) => void (output += d.toString()))
  return Object.assign(child, { output: () => output })
}

/** Stops a child: SIGTERM, then SIGKILL after `graceMs`; resolves with its exit code (or signal). */
export const stopChild = async (child: ChildProcess, graceMs = 10_000): Promise<number | string> => {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode ?? child.signalCode ?? -1
  const done = exited(child)
  child.kill("SIGTERM")
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs)
  try {
    return await done
  } finally {
    clearTimeout(timer)
  }
}
