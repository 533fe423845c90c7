/**
 * The one way Tidings reads configuration: every component (relay, consumer, connection, store,
 * server) describes its options as a `Schema`, and `decode` checks a whole options object at once,
 * failing with one `InvalidConfig` whose `issues` name every wrong setting by its path. The field
 * schemas here accept what users write (`"30 seconds"`, `250`, `Duration.seconds(1)`) and check
 * ranges, so that the messages read the same everywhere.
 * @since 0.1.0
 * @module
 */
import { Duration, Effect, Exit, Option, Schema, SchemaIssue, SchemaTransformation } from "effect"
import { InvalidConfig } from "./Errors.ts"

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
  { expected: "a duration (\"30 seconds\", milliseconds, or a Duration)" }
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
