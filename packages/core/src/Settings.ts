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
 * Builds an `InvalidConfig` from a list of problems (at least one). The message of a single problem
 * is its own (the path is in `path`), unless `namePaths` (environment variables: the message names
 * the variable too, as it does for several problems).
 * @since 0.1.0
 * @category constructors
 */
export const invalid = (
  issues: ReadonlyArray<{ readonly path: string; readonly message: string }>,
  options: { readonly namePaths?: boolean } = {}
): InvalidConfig => {
  const first = issues[0] ?? { path: "", message: "invalid configuration" }
  const message = issues.length <= 1 && options.namePaths !== true
    ? first.message
    : issues.map((i) => `${i.path === "" ? "(root)" : i.path}: ${i.message}`).join("; ")
  return new InvalidConfig({
    path: first.path,
    message,
    issues: issues.map((i) => ({ path: i.path, message: i.message }))
  })
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
export const decode = <S extends Schema.Codec<any, any, never, never>>(
  schema: S,
  input: unknown,
  prefix = ""
): Effect.Effect<S["Type"], InvalidConfig> => {
  const exit = Schema.decodeUnknownExit(schema)(input, { errors: "all" })
  if (Exit.isSuccess(exit)) return Effect.succeed(exit.value)
  const error = Exit.findErrorOption(exit)
  return Effect.fail(
    Option.isSome(error)
      ? fromSchemaError(error.value, prefix)
      : invalid([{ path: prefix, message: "invalid configuration" }])
  )
}

/**
 * The synchronous form of `decode`, for code that validates while building (throws `InvalidConfig`).
 * @since 0.1.0
 * @category decoding
 */
export const decodeSync = <S extends Schema.Codec<any, any, never, never>>(
  schema: S,
  input: unknown,
  prefix = ""
): S["Type"] => {
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
export const duration = (
  options: { readonly allowZero?: boolean } = {}
): Schema.Codec<Duration.Duration, Duration.Input> =>
  durationInput.pipe(
    Schema.decodeTo(
      Schema.Duration.check(Schema.makeFilter(
        (d: Duration.Duration) =>
          Duration.isFinite(d) && Duration.toMillis(d) >= 0 && (options.allowZero === true || Duration.toMillis(d) > 0)
            ? undefined
            : `must be a finite ${options.allowZero === true ? "non-negative" : "positive"} duration, got ${
              Duration.format(d)
            }`
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
  Schema.Number.check(
    Schema.makeFilter((n: number) =>
      Number.isInteger(n) && n >= min && n <= max ? undefined : `must be an integer from ${min} to ${max}, got ${n}`
    )
  )

/**
 * The type of a {@link duration} field, for explicit types on exported schemas.
 * @since 0.1.0
 * @category models
 */
export type DurationSetting = Schema.Codec<Duration.Duration, Duration.Input>

/**
 * The type of an {@link int} field.
 * @since 0.1.0
 * @category models
 */
export type IntSetting = Schema.Codec<number>

/**
 * The type of a field with a default (`field.pipe(Schema.withDecodingDefault(...))`).
 * @since 0.1.0
 * @category models
 */
export type Defaulted<S extends Schema.Top> = Schema.withDecodingDefault<S, never>

const secretInput = Schema.declare(
  (u: unknown): u is string | Redacted.Redacted<string> =>
    typeof u === "string" || (Redacted.isRedacted(u) && typeof Redacted.value(u) === "string"),
  { expected: "a string or a Redacted string", [Env.envAnnotation]: "secret" }
)

const redactedString = Schema.declare((u: unknown): u is Redacted.Redacted<string> => Redacted.isRedacted(u), {
  expected: "a Redacted string"
})

/**
 * A secret (a password, a URL with credentials, a token): given as a string or a `Redacted`,
 * decoded to a `Redacted` so that it never shows in logs or errors. `check` may refuse a value
 * with a message, which must not repeat the value.
 * @since 0.1.0
 * @category fields
 */
export const secret = (
  options: { readonly check?: (value: string) => string | undefined } = {}
): Schema.Codec<Redacted.Redacted<string>, string | Redacted.Redacted<string>> =>
  secretInput.pipe(
    Schema.decodeTo(
      redactedString.check(Schema.makeFilter((r: Redacted.Redacted<string>) => {
        const value = Redacted.value(r)
        if (value.trim() === "") return "must not be empty"
        return options.check?.(value)
      })),
      SchemaTransformation.transform({
        decode: (input: string | Redacted.Redacted<string>) =>
          Redacted.isRedacted(input) ? input : Redacted.make(input),
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
export const variables = (schema: Schema.Top, prefix: string, names?: Names): ReadonlyArray<Variable> =>
  Env.variables(schema, prefix, names)

/**
 * Variable names that differ from `PREFIX_PATH`, by option path: `{ schema: "TIDINGS_SCHEMA" }`
 * (one variable shared by several components); `false` for an option with no variable.
 * @since 0.1.0
 * @category models
 */
export type Names = Env.Names

/**
 * Where a component reads its settings from the environment, and the options given in code (the
 * defaults of its variables, and what has no variable).
 * @since 0.1.0
 * @category models
 */
export interface EnvironmentOptions<A> {
  /** Prefix of the variables (each component has its own default, e.g. `TIDINGS_RELAY`). */
  readonly prefix?: string
  readonly defaults?: A
}

/**
 * The default of each variable of a settings schema, as one would write it (`30 seconds`), by
 * variable name. Defaults derived from other options after decoding are not listed.
 * @since 0.1.0
 * @category environment
 */
export const defaults = (
  schema: Schema.Top & { readonly fields?: Schema.Struct.Fields },
  prefix: string,
  names?: Names
): ReadonlyMap<string, string> => Env.defaults(schema, prefix, names)

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
export const inEnvironment = (
  schema: Schema.Top,
  prefix: string,
  options: { readonly texts?: ReadonlyMap<string, string>; readonly names?: Names } = {}
) =>
(error: InvalidConfig): InvalidConfig =>
  invalid(
    Env.renameIssues(
      schema,
      prefix,
      error.issues ?? [{ path: error.path, message: error.message }],
      options.texts,
      options.names
    ),
    { namePaths: true }
  )

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
  options: { readonly defaults?: Partial<S["Encoded"]> | undefined; readonly names?: Names } = {}
): Effect.Effect<S["Type"], InvalidConfig> =>
  Env.readInput(schema, prefix, options.defaults, options.names).pipe(
    Effect.mapError((issues) => invalid(issues, { namePaths: true })),
    Effect.flatMap(({ input, texts }) =>
      Effect.mapError(
        decode(schema, input),
        inEnvironment(schema, prefix, { texts, ...(options.names === undefined ? {} : { names: options.names }) })
      )
    )
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
    if (issues.length > 0) return yield* Effect.fail(invalid(issues, { namePaths: true }))
    return out as { -readonly [K in keyof T]: Effect.Success<T[K]> }
  })

/**
 * How a component reads its settings from the environment: its settings schema, the default prefix
 * of its variables, and the variables named otherwise. Each component exports one (e.g.
 * `PgClient.environment`); its `layerConfig` reads through it, and the README's table of variables
 * is generated from all of them.
 * @since 0.1.0
 * @category models
 */
export interface Environment<S extends Schema.Codec<any, any, never, never>> {
  /** `PgClient`, `Relay`, ... */
  readonly component: string
  readonly schema: S
  /** Default prefix of the variables, e.g. `TIDINGS_RELAY`. */
  readonly prefix: string
  readonly names?: Names
}

/**
 * Settings with the options that are `undefined` left out (optional, not `undefined`), ready for a
 * component's exact `Config`.
 * @since 0.1.0
 * @category models
 */
export type Defined<T> =
  & { readonly [K in keyof T as undefined extends T[K] ? never : K]: T[K] }
  & { readonly [K in keyof T as undefined extends T[K] ? K : never]?: Exclude<T[K], undefined> }

/**
 * Reads a component's settings through its {@link Environment}: {@link fromConfig} with its schema,
 * prefix (or `options.prefix`) and names, on top of `options.defaults`; options left unset are
 * absent from the result.
 * @since 0.1.0
 * @category environment
 */
export const read = <S extends Schema.Codec<any, any, never, never>>(
  environment: Environment<S>,
  options: EnvironmentOptions<Partial<S["Encoded"]>> = {}
): Effect.Effect<Defined<S["Type"]>, InvalidConfig> =>
  Effect.map(
    fromConfig(environment.schema, options.prefix ?? environment.prefix, {
      defaults: options.defaults,
      ...(environment.names === undefined ? {} : { names: environment.names })
    }),
    (settings) =>
      Object.fromEntries(Object.entries(settings as object).filter(([, v]) => v !== undefined)) as Defined<S["Type"]>
  )
