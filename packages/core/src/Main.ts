/**
 * A process's main entry: `Main.runMain(program)` runs an Effect (or launches a Layer: a service
 * that lives until it is stopped) on Node, Deno or Bun, and stops it cleanly on SIGINT / SIGTERM:
 * the main fiber is interrupted, every finalizer runs (relays release their claims, consumers stop,
 * connections close), then the process exits with 0. A failure is logged and exits with 1 (or the
 * error's `Runtime.errorExitCode`); a program that ends by itself exits with 0.
 *
 * It uses only Effect's `Runtime.makeRunMain` and the host's own globals (`Deno` or `process`), so
 * it needs no platform package: `@effect/platform-node`'s `NodeRuntime.runMain` works too where its
 * Node version (>= 22.19) is available.
 * @module
 */
import { Cause, Effect, Exit, Layer, Runtime } from "effect"

/**
 * Options of {@link runMain}.
 * @since 0.1.0
 * @category options
 */
export interface RunMainOptions {
  /** Do not log the failure of the main effect (it still exits with 1). Default `false`. */
  readonly disableErrorReporting?: boolean | undefined
  /** The exit code after a stop signal once everything is released. Default `0`: a requested stop is a clean stop. */
  readonly signalExitCode?: number | undefined
  /**
   * Exit the process when the main effect ends (default `true`), so that a handle a library left
   * open cannot keep a finished program alive. `false` lets the process end by itself.
   */
  readonly exitOnCompletion?: boolean | undefined
}

/** The stop signals {@link runMain} listens to. */
const signals: ReadonlyArray<"SIGINT" | "SIGTERM"> = ["SIGINT", "SIGTERM"]

interface Host {
  /** Listens for `signal`; returns the function that stops listening. */
  readonly onSignal: (signal: "SIGINT" | "SIGTERM", handler: () => void) => () => void
  readonly exit: (code: number) => void
}

interface DenoLike {
  addSignalListener(signal: string, handler: () => void): void
  removeSignalListener(signal: string, handler: () => void): void
  exit(code: number): never
}

interface ProcessLike {
  on(signal: string, handler: () => void): unknown
  off(signal: string, handler: () => void): unknown
  exit(code: number): never
}

/**
 * The host's process API, found by feature detection: `process` (Node, Bun, and Deno 2, whose
 * `process.on` also sees signals), else Deno's own API.
 */
const currentHost = (): Host | undefined => {
  const g = globalThis as { readonly Deno?: DenoLike; readonly process?: ProcessLike }
  const proc = g.process
  if (
    proc !== undefined && typeof proc.on === "function" && typeof proc.off === "function" &&
    typeof proc.exit === "function"
  ) {
    return {
      onSignal: (signal, handler) => {
        proc.on(signal, handler)
        return () => void proc.off(signal, handler)
      },
      exit: (code) => proc.exit(code)
    }
  }
  const deno = g.Deno
  if (deno !== undefined && typeof deno.addSignalListener === "function") {
    return {
      onSignal: (signal, handler) => {
        try {
          deno.addSignalListener(signal, handler)
        } catch {
          return () => {} // e.g. SIGTERM on Windows: not a signal Deno can listen to there
        }
        return () => deno.removeSignalListener(signal, handler)
      },
      exit: (code) => deno.exit(code)
    }
  }
  return undefined
}

const exitCode = (exit: Exit.Exit<unknown, unknown>, signalled: boolean, signalExitCode: number): number => {
  if (Exit.isSuccess(exit)) return signalled ? signalExitCode : 0
  if (Cause.hasInterruptsOnly(exit.cause)) return signalled ? signalExitCode : 130
  // A finalizer that failed during a signalled stop is still a failure.
  let code = 1
  Runtime.defaultTeardown(exit, (c) => {
    code = c
  })
  return code
}

/**
 * Runs `main` as the process's main program. An Effect runs until it ends; a Layer is launched
 * (built and kept until a signal: `Layer.launch`). On the first SIGINT or SIGTERM the main fiber is
 * interrupted and its finalizers run; a second signal exits at once with 130.
 *
 * @example
 * ```ts
 * import { Main, Relay } from "@tidings/core"
 * Main.runMain(Relay.layer().pipe(Layer.provide(AppLayer)))
 * ```
 * @since 0.1.0
 * @category running
 */
export function runMain<A, E>(main: Effect.Effect<A, E> | Layer.Layer<A, E>, options?: RunMainOptions): void {
  const program: Effect.Effect<unknown, E> = Layer.isLayer(main)
    ? Layer.launch(main as Layer.Layer<A, E>)
    : main as Effect.Effect<A, E>
  const signalExitCode = options?.signalExitCode ?? 0
  const exitOnCompletion = options?.exitOnCompletion ?? true
  const run = Runtime.makeRunMain(({ fiber, teardown }) => {
    const host = currentHost()
    if (host === undefined) {
      // No process to exit (a browser, a worker): run to completion; makeRunMain reports a failure.
      fiber.addObserver((exit) => teardown(exit, () => {}))
      return
    }
    let signalled = false
    const onSignal = () => {
      if (signalled) {
        // Asked twice: the caller does not want to wait for the finalizers.
        host.exit(130)
        return
      }
      signalled = true
      fiber.interruptUnsafe(fiber.id)
    }
    const unlisten = signals.map((signal) => host.onSignal(signal, onSignal))
    fiber.addObserver((exit) => {
      for (const stop of unlisten) stop()
      teardown(exit, () => {
        const code = exitCode(exit, signalled, signalExitCode)
        if (exitOnCompletion || signalled || code !== 0) host.exit(code)
      })
    })
  })
  run(program, { disableErrorReporting: options?.disableErrorReporting === true })
}
