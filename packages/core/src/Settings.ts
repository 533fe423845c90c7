/**
 * The one way Tidings reads configuration: every component (relay, consumer, connection, store,
 * server) describes its options as a `Schema`, and `decode` checks a whole options object at once,
 * failing with one `InvalidConfig` whose `issues` name every wrong setting by its path. The field
 * schemas here accept what users write (`"30 seconds"`, `250`, `Duration.seconds(1)`) and check
 * ranges, so that the messages read the same everywhere.
 * @since 0.1.0
 * @module
 */
import { Duration, Effect, Exit, Option, Redacted, Schema, SchemaIssue, SchemaTransformation } from "effect"
import { InvalidConfig } from "./Errors.ts"
import * as Env from "./internal/settingsEnv.ts"

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

const pathText = (path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }>, prefix: string): string => {
  const keys = path.map((p) => String(typeof p === "object" && p !== null ? p.key : p))
  return [prefix, ...keys].filter((k) => k !== "").join(".")
}

/**
 * Builds an `InvalidConfig` from a list of problems (at least one).
 * @since 0.1.0
 * @category constructors
 */
export const invalid = (issues: ReadonlyArray<{ readonly path: string; readonly message: string }>): InvalidConfig => {
  const first = issues[0] ?? { path: "", message: "invalid configuration" }
  const message = issues.length <= 1
    ? first.message
    : issues.map((i) => `${i.path === "" ? "(root)" : i.path}: ${i.message}`).join("; ")
  return new InvalidConfig({ path: first.path, message, issues: issues.map((i) => ({ path: i.path, message: i.message })) })
}

/**
 * Turns a `SchemaError` into an `InvalidConfig` naming every failing path (under `prefix`).
 * @since 0.1.0
 * @category constructors
 */
export const fromSchemaError = (error: Schema.SchemaError, prefix = ""): InvalidConfig =>
  invalid(formatter(error.issue).issues.map((i) => ({ path: pathText(i.path ?? [], prefix), message: i.message })))

/**
 * Decodes `input` with `schema`, reporting every problem (not just the first) in one
 * `InvalidConfig`. `prefix` is prepended to the paths (e.g. the component's name).
 * @since 0.1.0
 * @category decoding
 */
export const decode = <S extends Schema.Codec<any, any, never, never>>(schema: S, input: unknown, prefix = ""): Effect.Effect<S["Type"], InvalidConfig> => {
  const exit = Schema.decodeUnknownExit(schema)(input, { errors: "all" })
  if (Exit.isSuccess(exit)) return Effect.succeed(exit.value)
  const error = Exit.findErrorOption(exit)
  return Effect.fail(Option.isSome(error) ? fromSchemaError(error.value, prefix) : invalid([{ path: prefix, message: "invalid configuration" }]))
}

/**
 * The synchronous form of `decode`, for code that validates while building (throws `InvalidConfig`).
 * @since 0.1.0
 * @category decoding
 */
export const decodeSync = <S extends Schema.Codec<any, any, never, never>>(schema: S, input: unknown, prefix = ""): S["Type"] => {
  const exit = Effect.runSyncExit(decode(schema, input, prefix))
  if (Exit.isSuccess(exit)) return exit.value
  throw Option.getOrThrow(Exit.findErrorOption(exit))
}

const durationInput = Schema.declare(
  (u: unknown): u is Duration.Input => {
    if (u === null || u === undefined) return false
    try {
      return Option.isSome(Duration.fromInput(u as Duration.Input))
    } catch {
      return false
    }
  },
  { expected: "a duration (\"30 seconds\", milliseconds, or a Duration)", [Env.envAnnotation]: "duration" }
)

/**
 * A duration as users write it (`"30 seconds"`, milliseconds, a `Duration`), decoded to a finite
 * `Duration`. By default it must be positive; `{ allowZero: true }` accepts zero.
 * @since 0.1.0
 * @category fields
 */
export const duration = (options: { readonly allowZero?: boolean } = {}): Schema.Codec<Duration.Duration, Duration.Input> =>
  durationInput.pipe(
    Schema.decodeTo(
      Schema.Duration.check(Schema.makeFilter(
        (d: Duration.Duration) =>
          Duration.isFinite(d) && Duration.toMillis(d) >= 0 && (options.allowZero === true || Duration.toMillis(d) > 0)
            ? undefined
            : `must be a finite ${options.allowZero === true ? "non-negative" : "positive"} duration, got ${Duration.format(d)}`
      )),
      SchemaTransformation.transform({
        decode: (input: Duration.Input) => Duration.fromInputUnsafe(input),
        encode: (d: Duration.Duration): Duration.Input => d
      })
    )
  )

/**
 * An integer from `min` to `max` (inclusive).
 * @since 0.1.0
 * @category fields
 */
export const int = (min: number, max: number): Schema.Codec<number> =>
  Schema.Number.check(Schema.makeFilter((n: number) =>
    Number.isInteger(n) && n >= min && n <= max ? undefined : `must be an integer from ${min} to ${max}, got ${n}`
  ))

const secretInput = Schema.declare(
  (u: unknown): u is string | Redacted.Redacted<string> => typeof u === "string" || (Redacted.isRedacted(u) && typeof Redacted.value(u) === "string"),
  { expected: "a string or a Redacted string", [Env.envAnnotation]: "secret" }
)

const redactedString = Schema.declare((u: unknown): u is Redacted.Redacted<string> => Redacted.isRedacted(u), { expected: "a Redacted string" })

/**
 * A secret (a password, a URL with credentials, a token): given as a string or a `Redacted`,
 * decoded to a `Redacted` so that it never shows in logs or errors. `check` may refuse a value
 * with a message, which must not repeat the value.
 * @since 0.1.0
 * @category fields
 */
export const secret = (options: { readonly check?: (value: string) => string | undefined } = {}): Schema.Codec<Redacted.Redacted<string>, string | Redacted.Redacted<string>> =>
  secretInput.pipe(
    Schema.decodeTo(
      redactedString.check(Schema.makeFilter((r: Redacted.Redacted<string>) => {
        const value = Redacted.value(r)
        if (value.trim() === "") return "must not be empty"
        return options.check?.(value)
      })),
      SchemaTransformation.transform({
        decode: (input: string | Redacted.Redacted<string>) => Redacted.isRedacted(input) ? input : Redacted.make(input),
        encode: (r: Redacted.Redacted<string>): string | Redacted.Redacted<string> => r
      })
    )
  )

/**
 * One environment variable of a settings schema (see {@link variables}).
 * @since 0.1.0
 * @category models
 */
export type Variable = Env.Variable

/**
 * The environment variables a settings schema (a `Schema.Struct`) reads under `prefix`: one per
 * data field, named `PREFIX_FIELD_NAME` (nested options `PREFIX_GROUP_FIELD`, e.g.
 * `TIDINGS_RELAY_POLL_INTERVAL_MIN`). Fields that are not data (a `Schedule`, a handler) have none.
 * @since 0.1.0
 * @category environment
 */
export const variables = (schema: Schema.Top, prefix: string): ReadonlyArray<Variable> => Env.variables(schema, prefix)

/**
 * The default of each variable of a settings schema, as one would write it (`30 seconds`), by
 * variable name. Defaults derived from other options after decoding are not listed.
 * @since 0.1.0
 * @category environment
 */
export const defaults = (schema: Schema.Top & { readonly fields?: Schema.Struct.Fields }, prefix: string): ReadonlyMap<string, string> =>
  Env.defaults(schema, prefix)

/**
 * The variable name of an option path under `prefix`: `envName("TIDINGS_RELAY", ["pollInterval", "min"])`
 * is `TIDINGS_RELAY_POLL_INTERVAL_MIN`.
 * @since 0.1.0
 * @category environment
 */
export const envName = (prefix: string, path: ReadonlyArray<string>): string => Env.envName(prefix, path)

/**
 * Renames the issues of an `InvalidConfig` about the options of `schema` (a component's own checks
 * after decoding, e.g. "publishTimeout must be shorter than the lease") to the variables under
 * `prefix`, for errors of settings read from the environment.
 * @since 0.1.0
 * @category environment
 */
export const inEnvironment = (schema: Schema.Top, prefix: string, texts?: ReadonlyMap<string, string>) => (error: InvalidConfig): InvalidConfig =>
  invalid(Env.renameIssues(schema, prefix, error.issues ?? [{ path: error.path, message: error.message }], texts))

/**
 * Reads a component's settings from the environment with Effect's `Config` (the current
 * `ConfigProvider`; by default the process environment): every variable of `schema` under
 * `prefix` (see {@link variables}) as text, converted (numbers, booleans, `30 seconds`, comma
 * lists, `false` for an option that can be turned off) and decoded by the same schema as object
 * config, on top of the values given in code (`defaults`). Fails with ONE `InvalidConfig` naming
 * every wrong variable, by its name; a secret's value never appears in it.
 * @since 0.1.0
 * @category environment
 */
export const fromConfig = <S extends Schema.Codec<any, any, never, never>>(
  schema: S,
  prefix: string,
  options: { readonly defaults?: Partial<S["Encoded"]> } = {}
): Effect.Effect<S["Type"], InvalidConfig> =>
  Env.readInput(schema, prefix, options.defaults).pipe(
    Effect.mapError(invalid),
    Effect.flatMap(({ input, texts }) => Effect.mapError(decode(schema, input), inEnvironment(schema, prefix, texts)))
  )

/**
 * Runs several settings reads (e.g. one {@link fromConfig} per component) and fails with ONE
 * `InvalidConfig` holding the issues of all of them, so that a start-up names every wrong
 * variable at once.
 * @since 0.1.0
 * @category environment
 */
export const all = <const T extends Record<string, Effect.Effect<any, InvalidConfig, any>>>(
  reads: T
): Effect.Effect<{ -readonly [K in keyof T]: Effect.Success<T[K]> }, InvalidConfig, Effect.Services<T[keyof T]>> =>
  Effect.gen(function*() {
    const out: Record<string, unknown> = {}
    const issues: Array<{ readonly path: string; readonly message: string }> = []
    for (const [key, read] of Object.entries(reads)) {
      const result = yield* Effect.result(read)
      if (result._tag === "Success") out[key] = result.success
      else issues.push(...(result.failure.issues ?? [{ path: result.failure.path, message: result.failure.message }]))
    }
    if (issues.length > 0) return yield* Effect.fail(invalid(issues))
    return out as { -readonly [K in keyof T]: Effect.Success<T[K]> }
  })
