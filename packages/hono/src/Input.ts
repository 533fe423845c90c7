/**
 * Decoding request input with `effect/Schema`. Every failure is a `BadRequest` (400) carrying the
 * schema issues with their path (`["body", "items", 0]`, `["params", "id"]`, `["query", "limit"]`),
 * so a malformed request never turns into a 500; a JSON body is bounded before it is parsed (413,
 * 415, see {@link jsonBody}).
 * @module
 */
import { Effect, Schema } from "effect"
import type { Context as HonoContext } from "hono"
import { BadRequest, issuesOf, PayloadTooLarge, UnsupportedMediaType } from "./HttpErrors.ts"
import * as Body from "./internal/body.ts"

/**
 * A schema that decodes unknown input (its encoded side is not constrained).
 * @since 0.1.0
 * @category models
 */
export type Decoder<A, RD = never> = Schema.Decoder<A, RD>

// A NUL can reach a handler in a percent-decoded path or query when `Safety` is not installed; no
// text column holds one, so it would become a database error (a 500) instead of a 400.
const nulIn = (value: unknown): boolean =>
  typeof value === "string"
    ? value.includes("\0")
    : typeof value === "object" && value !== null && Object.values(value).some(nulIn)

const decode = <A, RD>(schema: Decoder<A, RD>, value: unknown, where: string): Effect.Effect<A, BadRequest, RD> => {
  if (where !== "body" && nulIn(value)) {
    return Effect.fail(
      new BadRequest({
        message: `invalid ${where}`,
        issues: [{ path: [where], message: "a NUL character is not accepted" }]
      })
    )
  }
  return Schema.decodeUnknownEffect(schema)(value, { errors: "all" }).pipe(
    Effect.catchTag(
      "SchemaError",
      (error) => Effect.fail(new BadRequest({ message: `invalid ${where}`, issues: issuesOf(error, [where]) }))
    )
  ) as Effect.Effect<A, BadRequest, RD>
}

/**
 * How a JSON body is read: the limits of `Safety.middleware` (or the defaults), per call overridable.
 * @since 0.1.0
 * @category options
 */
export interface JsonOptions {
  /** Largest body in bytes (default: the middleware's, else 1 MiB); larger answers 413, unread. */
  readonly bodyLimit?: number
  /** Deepest nesting of arrays and objects (default: the middleware's, else 64). */
  readonly maxJsonDepth?: number
}

const invalid = (message: string, detail: string) =>
  new BadRequest({ message, issues: [{ path: ["body"], message: detail }] })

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false })

/**
 * The body parsed as JSON, without a schema. Before anything is parsed: `Content-Type` must be
 * `application/json` (or `+json`; 415 otherwise, so a cross-site form cannot post), the body at
 * most `bodyLimit` bytes (413, checked on `Content-Length` and counted while streaming), valid UTF-8,
 * nested at most `maxJsonDepth` deep, and without `\u0000` (which no text column holds): 400 otherwise.
 * @since 0.1.0
 * @category decoding
 */
export const jsonBody = (
  c: HonoContext,
  options: JsonOptions = {}
): Effect.Effect<unknown, BadRequest | PayloadTooLarge | UnsupportedMediaType> =>
  Effect.gen(function*() {
    const limits = Body.limitsOf(c)
    const bodyLimit = options.bodyLimit ?? limits.bodyLimit
    const maxDepth = options.maxJsonDepth ?? limits.maxJsonDepth
    if (!Body.isJson(c.req.header("content-type"))) {
      return yield* new UnsupportedMediaType({
        message: "the request body must be JSON, sent with content-type: application/json"
      })
    }
    const bytes = yield* Effect.tryPromise({
      try: () => Body.read(c.req.raw, bodyLimit),
      catch: (error) =>
        error instanceof PayloadTooLarge ? error : new BadRequest({ message: "could not read the request body" })
    })
    let text: string
    try {
      text = utf8.decode(bytes)
    } catch {
      return yield* invalid("the request body is not valid UTF-8", "invalid UTF-8")
    }
    if (text.trim() === "") return yield* invalid("the request body must be JSON, and it is empty", "empty body")
    if (Body.exceedsDepth(text, maxDepth)) {
      return yield* invalid(
        "the request body is nested too deeply",
        `more than ${maxDepth} levels of arrays and objects`
      )
    }
    if (/\\u0000/i.test(text)) {
      return yield* invalid("the request body contains a NUL character", "\\u0000 is not accepted in text")
    }
    return yield* Effect.try({
      try: (): unknown => JSON.parse(text),
      catch: (error) =>
        invalid("the request body is not valid JSON", error instanceof Error ? error.message : "invalid JSON")
    })
  })

/**
 * The JSON body decoded by `schema`.
 * @since 0.1.0
 * @category decoding
 */
export const json = <A, RD>(
  c: HonoContext,
  schema: Decoder<A, RD>,
  options: JsonOptions = {}
): Effect.Effect<A, BadRequest | PayloadTooLarge | UnsupportedMediaType, RD> =>
  Effect.flatMap(jsonBody(c, options), (value) => decode(schema, value, "body"))

/**
 * One path parameter decoded by `schema` (e.g. `Schema.String.check(Schema.isUUID())`).
 * @since 0.1.0
 * @category decoding
 */
export const param = <A, RD>(c: HonoContext, name: string, schema: Decoder<A, RD>): Effect.Effect<A, BadRequest, RD> =>
  Effect.suspend(() => decode(schema, c.req.param(name), "params")).pipe(
    Effect.mapError((e) =>
      new BadRequest({
        message: `invalid path parameter ${name}`,
        issues: (e.issues ?? []).map((i) => ({ ...i, path: ["params", name, ...i.path.slice(1)] }))
      })
    )
  )

/**
 * All path parameters decoded by a struct schema.
 * @since 0.1.0
 * @category decoding
 */
export const params = <A, RD>(c: HonoContext, schema: Decoder<A, RD>): Effect.Effect<A, BadRequest, RD> =>
  Effect.suspend(() => decode(schema, c.req.param(), "params"))

/**
 * The query string decoded by a struct schema; each key is a string (the last value when repeated),
 * so use `Schema.NumberFromString` & co for numbers.
 * @since 0.1.0
 * @category decoding
 */
export const query = <A, RD>(c: HonoContext, schema: Decoder<A, RD>): Effect.Effect<A, BadRequest, RD> =>
  Effect.suspend(() => decode(schema, c.req.query(), "query"))
