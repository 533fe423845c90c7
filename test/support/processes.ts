/**
 * Spawning TypeScript child processes on the runtime the tests run on: Node (type stripping) or Deno.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"

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

/**
 * The CPU time (clock ticks) used by the process `pid` and its descendants, from /proc (Linux), or
 * undefined where there is no /proc. A child that uses CPU is making progress, even when it prints
 * nothing for a while (a runtime loading and compiling modules on a loaded machine).
 */
export const treeCpuTicks = (pid: number): number | undefined => {
  let entries: Array<string>
  try {
    entries = fs.readdirSync("/proc").filter((e) => /^\d+$/.test(e))
  } catch {
    return undefined
  }
  const stats = new Map<number, { readonly ppid: number; readonly ticks: number }>()
  for (const entry of entries) {
    try {
      // pid (comm) state ppid ... utime stime cutime cstime: comm may hold spaces, so split after it.
      const text = fs.readFileSync(`/proc/${entry}/stat`, "utf8")
      const fields = text.slice(text.lastIndexOf(")") + 2).split(" ")
      stats.set(Number(entry), {
        ppid: Number(fields[1]),
        ticks: Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])
      })
    } catch {
      // the process ended meanwhile
    }
  }
  if (!stats.has(pid)) return undefined
  let total = 0
  const queue = [pid]
  while (queue.length > 0) {
    const current = queue.pop()!
    total += stats.get(current)?.ticks ?? 0
    for (const [child, stat] of stats) if (stat.ppid === current) queue.push(child)
  }
  return total
}

/** What tells that a child is still working: its output so far and the CPU its process tree used. */
const progressOf = (child: ChildProcess & { output: () => string }) =>
  `${child.output().length}/${child.pid === undefined ? "" : treeCpuTicks(child.pid) ?? ""}`

/** How long a child may show no progress (no output, no CPU) before a wait on it gives up. */
export const defaultStallMs = 30_000

/**
 * Calls `onStall` once the child has shown no progress (no new output, no CPU used by it or its
 * children) for `stallMs`; returns a function that stops watching.
 */
export const watchProgress = (
  child: ChildProcess & { output: () => string },
  stallMs: number,
  onStall: () => void
): () => void => {
  let last = progressOf(child)
  let lastChange = Date.now()
  const timer = setInterval(() => {
    const now = progressOf(child)
    if (now !== last) {
      last = now
      lastChange = Date.now()
    } else if (Date.now() - lastChange >= stallMs) {
      clearInterval(timer)
      onStall()
    }
  }, 250)
  return () => clearInterval(timer)
}

/**
 * Resolves when the child prints `text`; rejects when it exits first, or when it stops making
 * progress for `stallMs` (see {@link watchProgress}). No fixed cap: a child that is slow because the
 * machine is loaded is waited for.
 */
export const waitForOutput = (
  child: ChildProcess & { output: () => string },
  text: string,
  stallMs = defaultStallMs
): Promise<void> =>
  new Promise((resolve, reject) => {
    const done = (error?: Error) => {
      stopWatching()
      child.stdout?.off("data", check)
      child.off("exit", onExit)
      if (error === undefined) resolve()
      else reject(error)
    }
    const check = () => {
      if (child.output().includes(text)) done()
    }
    const onExit = () => {
      if (child.output().includes(text)) done()
      else done(new Error(`exited before "${text}"; output:\n${child.output()}`))
    }
    const stopWatching = watchProgress(child, stallMs, () => {
      if (child.output().includes(text)) done()
      else {done(
          new Error(
            `gave up waiting for "${text}": no output and no CPU used for ${stallMs} ms; output:\n${child.output()}`
          )
        )}
    })
    child.stdout?.on("data", check)
    child.once("exit", onExit)
    if (child.exitCode !== null || child.signalCode !== null) onExit()
    else check()
  })

/**
 * Runs an example script to completion against the test servers and returns its exit code and
 * output. A child that stops making progress for `stallMs` is killed (see {@link watchProgress}).
 */
export const runExample = async (script: string, env: Record<string, string>, stallMs = defaultStallMs) => {
  const child = spawnScript(script, env)
  const stopWatching = watchProgress(child, stallMs, () => child.kill("SIGKILL"))
  try {
    const code = await exited(child)
    return { code, output: child.output() }
  } finally {
    stopWatching()
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
  const child = spawn(cmd, [...runtimeArgs, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
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
