/**
 * What Effect's CLI module needs from the platform, made from the process itself so that the same
 * code runs on Node and Deno without a platform package: the arguments, a terminal whose output is
 * the {@link Output} service's, and no file system or child processes (no command uses them).
 */
import { Effect, FileSystem, Layer, Path, Sink, Stdio, Stream, Terminal } from "effect"
import { ChildProcessSpawner } from "effect/process"
import * as Output from "./output.ts"

const unused = (what: string) => Effect.die(new Error(`the tidings CLI does not use ${what}`))

/** The CLI module's environment for `args`. */
export const layer = (args: ReadonlyArray<string>) =>
  Layer.unwrap(Effect.map(Output.current, (output) =>
    Layer.mergeAll(
      FileSystem.layerNoop({}),
      Path.layer,
      Layer.succeed(
        Stdio.Stdio,
        Stdio.make({
          args: Effect.succeed(args),
          stdout: () =>
            Sink.forEach((chunk: string | Uint8Array) =>
              Effect.sync(() => output.write(typeof chunk === "string" ? chunk : new TextDecoder().decode(chunk)))
            ),
          stderr: () =>
            Sink.forEach((chunk: string | Uint8Array) =>
              Effect.sync(() => output.error(typeof chunk === "string" ? chunk : new TextDecoder().decode(chunk)))
            ),
          stdin: Stream.empty
        })
      ),
      Layer.succeed(
        Terminal.Terminal,
        Terminal.make({
          columns: Effect.sync(() => output.columns),
          rows: Effect.succeed(24),
          size: unused("terminal resizing"),
          readInput: unused("terminal input"),
          readLine: unused("terminal input"),
          display: (text) => Effect.sync(() => output.write(text))
        })
      ),
      Layer.succeed(ChildProcessSpawner.ChildProcessSpawner, ChildProcessSpawner.make(() => unused("child processes")))
    )))
