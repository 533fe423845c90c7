/**
 * Decoding request input with `effect/Schema`. Every failure is a `BadRequest` (400) carrying the
 * schema issues with their path (`["body", "items", 0]`, `["params", "id"]`, `["query", "limit"]`),
 * so a malformed request never turns into a 500.
 * @module
 */
import { Effect, Schema } from "effect"
import type { Context as HonoContext } from "hono"
import { BadRequest, issuesOf } from "./HttpErrors.ts"

/** A schema that decodes unknown input (its encoded side is not constrained). */
export type Decoder<A, RD = never> = Schema.Decoder<A, RD>

const decode = <A, RD>(schema: Decoder<A, RD>, value: unknown, where: string) =>
  Schema.decodeUnknownEffect(schema)(value, { errors: "all" }).pipe(
    Effect.catchTag("SchemaError", (error) =>
      Effect.fail(new BadRequest({ message: `invalid ${where}`, issues: issuesOf(error, [where]) })))
  ) as Effect.Effect<A, BadRequest, RD>

/** The body parsed as JSON (400 when it is not JSON), without a schema. */
export const jsonBody = (c: HonoContext): Effect.Effect<unknown, BadRequest> =>
  Effect.tryPromise({
    try: () => c.req.text(),
    catch: () => new BadRequest({ message: "could not read the request body" })
  }).pipe(
    Effect.flatMap((text) =>
      Effect.try({
        try: (): unknown => JSON.parse(text),
        catch: (error) =>
          new BadRequest({
            message: text.trim() === "" ? "the request body must be JSON, and it is empty" : "the request body is not valid JSON",
            issues: [{ path: ["body"], message: error instanceof Error ? error.message : "invalid JSON" }]
          })
      })
    )
  )

/** The JSON body decoded by `schema`. */
export const json = <A, RD>(c: HonoContext, schema: Decoder<A, RD>): Effect.Effect<A, BadRequest, RD> =>
  Effect.flatMap(jsonBody(c), (value) => decode(schema, value, "body"))

/** One path parameter decoded by `schema` (e.g. `Schema.String.check(Schema.isUUID())`). */
export const param = <A, RD>(c: HonoContext, name: string, schema: Decoder<A, RD>): Effect.Effect<A, BadRequest, RD> =>
  Effect.suspend(() => decode(schema, c.req.param(name), "params")).pipe(
    Effect.mapError((e) => new BadRequest({ message: `invalid path parameter ${name}`, issues: (e.issues ?? []).map((i) => ({ ...i, path: ["params", name, ...i.path.slice(1)] })) }))
  )

/** All path parameters decoded by a struct schema. */
export const params = <A, RD>(c: HonoContext, schema: Decoder<A, RD>): Effect.Effect<A, BadRequest, RD> =>
  Effect.suspend(() => decode(schema, c.req.param(), "params"))

/**
 * The query string decoded by a struct schema; each key is a string (the last value when repeated),
 * so use `Schema.NumberFromString` & co for numbers.
 */
export const query = <A, RD>(c: HonoContext, schema: Decoder<A, RD>): Effect.Effect<A, BadRequest, RD> =>
  Effect.suspend(() => decode(schema, c.req.query(), "query"))
