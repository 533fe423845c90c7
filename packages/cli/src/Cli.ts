/**
 * The `tidings` command, built on Effect's CLI module (`effect/cli`): `migrate`, `outbox`, `inbox`,
 * `dlq`, `saga`, `relay` and `doctor`, with tables by default and `--json` for scripts. {@link run}
 * runs it on a list of arguments and returns the exit code (0 done, 1 failed or problems found, 2
 * usage error); `bin.ts` is the executable.
 * @module
 */
import { Cause, Effect, Exit, Option, References } from "effect"
import { CliError, Command } from "effect/cli"
import * as DeadLetters from "./internal/commands/dlq.ts"
import * as Doctor from "./internal/commands/doctor.ts"
import * as Inbox from "./internal/commands/inbox.ts"
import * as Migrate from "./internal/commands/migrate.ts"
import * as Outbox from "./internal/commands/outbox.ts"
import * as Relay from "./internal/commands/relay.ts"
import * as Saga from "./internal/commands/saga.ts"
import * as Environment from "./internal/environment.ts"
import * as Out from "./internal/output.ts"
import { type CommandError, root, type SharedFlags } from "./internal/root.ts"

export { Output } from "./internal/output.ts"
export type { Service as OutputService } from "./internal/output.ts"

/**
 * The package version, shown by `tidings --version`.
 * @since 0.1.0
 * @category constants
 */
export const version = "0.1.0"

/**
 * The command tree.
 * @since 0.1.0
 * @category commands
 */
export const command: Command.Command<"tidings", SharedFlags, SharedFlags, CommandError | Doctor.ProblemsFound, never> =
  root.pipe(
    Command.withSubcommands([
      Migrate.command,
      Outbox.command,
      Inbox.command,
      DeadLetters.command,
      Saga.command,
      Relay.command,
      Doctor.command
    ])
  )

const message = (error: unknown): string => {
  const e = error as { readonly message?: unknown; readonly _tag?: unknown }
  const tag = typeof e?._tag === "string" ? e._tag : undefined
  const text = typeof e?.message === "string" && e.message !== "" ? e.message : undefined
  return text ?? tag ?? String(error)
}

/**
 * Runs `tidings` with `args` (without the executable and script), writing to the `Output` service
 * (standard output and error by default); succeeds with the exit code. An interruption (a signal
 * stopping `tidings relay`) is a normal end: 0.
 * @since 0.1.0
 * @category running
 */
export const run = (args: ReadonlyArray<string>): Effect.Effect<number> =>
  Command.runWith(command, { version })(args).pipe(
    Effect.provide(Environment.layer(args)),
    // The drivers' retry warnings are noise in a command's output; --log-level shows them.
    Effect.provideService(References.MinimumLogLevel, "Error"),
    Effect.exit,
    Effect.flatMap((exit) => {
      if (Exit.isSuccess(exit)) return Effect.succeed(0)
      if (Cause.hasInterruptsOnly(exit.cause)) return Effect.succeed(0)
      const error = Option.getOrUndefined(Exit.findErrorOption(exit))
      // The doctor printed its findings; help and parse errors were presented by the CLI module.
      if (error instanceof Doctor.ProblemsFound) return Effect.succeed(1)
      // A usage error (help shown with the errors) is 2; help asked for by calling a group without a subcommand is 0.
      if (CliError.isCliError(error)) {
        return Effect.succeed(error._tag === "ShowHelp" && error.errors.length === 0 ? 0 : 2)
      }
      return Effect.as(Out.warn(`tidings: ${error === undefined ? Cause.pretty(exit.cause) : message(error)}`), 1)
    })
  )
