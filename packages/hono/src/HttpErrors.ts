/**
 * One JSON error shape for every route, and the mapping from typed errors to status codes.
 *
 * Every error response is `{ "error": { "tag": string, "message": string, "issues"?: Issue[] } }`.
 * Client errors (4xx) carry the error's own message; server errors (5xx) carry a generic one and are
 * logged with their cause instead, so that SQL text, hosts or stack traces never reach a client.
 * @module
 */
import * as Errors from "@tidings/core/Errors"
import { Cause, Effect, Option, Schema, SchemaIssue } from "effect"
import type { ErrorHandler, NotFoundHandler } from "hono"
import * as Json from "./internal/json.ts"

/**
 * One problem with a request, with the path into the input (`["body", "items", 0, "sku"]`).
 * @since 0.1.0
 * @category schemas
 */
export const Issue: Schema.Struct<{
  readonly path: Schema.$Array<Schema.Union<readonly [Schema.String, Schema.Number]>>
  readonly message: Schema.String
}> = Schema.Struct({ path: Schema.Array(Schema.Union([Schema.String, Schema.Number])), message: Schema.String })
/**
 * @since 0.1.0
 * @category models
 */
export type Issue = typeof Issue.Type

/**
 * The body of every error response.
 * @since 0.1.0
 * @category models
 */
export interface ErrorBody {
  readonly error: {
    readonly tag: string
    readonly message: string
    readonly issues?: ReadonlyArray<Issue>
  }
}

const BadRequestBase: Schema.Class<
  BadRequest,
  Schema.TaggedStruct<"BadRequest", {
    readonly message: Schema.String
    readonly issues: Schema.optional<Schema.$Array<typeof Issue>>
  }>,
  Cause.YieldableError
> = Schema.TaggedError<BadRequest>()("BadRequest", {
  message: Schema.String,
  issues: Schema.optional(Schema.Array(Issue))
})

/**
 * The request is malformed: bad JSON, a body, path or query parameter failing its schema.
 * @since 0.1.0
 * @category errors
 */
export class BadRequest extends BadRequestBase {
  get httpStatus(): number {
    return 400
  }
}

const UnauthorizedBase: Schema.Class<
  Unauthorized,
  Schema.TaggedStruct<"Unauthorized", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<Unauthorized>()("Unauthorized", { message: Schema.String })

/**
 * No credentials, or wrong ones.
 * @since 0.1.0
 * @category errors
 */
export class Unauthorized extends UnauthorizedBase {
  get httpStatus(): number {
    return 401
  }
}

const ForbiddenBase: Schema.Class<
  Forbidden,
  Schema.TaggedStruct<"Forbidden", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<Forbidden>()("Forbidden", { message: Schema.String })

/**
 * The route is closed (admin routes without a configured token or middleware) or the caller may not use it.
 * @since 0.1.0
 * @category errors
 */
export class Forbidden extends ForbiddenBase {
  get httpStatus(): number {
    return 403
  }
}

const NotFoundBase: Schema.Class<
  NotFound,
  Schema.TaggedStruct<"NotFound", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<NotFound>()("NotFound", { message: Schema.String })

/**
 * The resource does not exist.
 * @since 0.1.0
 * @category errors
 */
export class NotFound extends NotFoundBase {
  get httpStatus(): number {
    return 404
  }
}

const MethodNotAllowedBase: Schema.Class<
  MethodNotAllowed,
  Schema.TaggedStruct<"MethodNotAllowed", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<MethodNotAllowed>()("MethodNotAllowed", { message: Schema.String })

/**
 * The path exists, but not for this method (the `Allow` header lists the methods it has).
 * @since 0.1.0
 * @category errors
 */
export class MethodNotAllowed extends MethodNotAllowedBase {
  get httpStatus(): number {
    return 405
  }
}

const PayloadTooLargeBase: Schema.Class<
  PayloadTooLarge,
  Schema.TaggedStruct<"PayloadTooLarge", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", { message: Schema.String })

/**
 * The request body is larger than the limit (see `Safety`); it was not read past the limit.
 * @since 0.1.0
 * @category errors
 */
export class PayloadTooLarge extends PayloadTooLargeBase {
  get httpStatus(): number {
    return 413
  }
}

const UnsupportedMediaTypeBase: Schema.Class<
  UnsupportedMediaType,
  Schema.TaggedStruct<"UnsupportedMediaType", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", { message: Schema.String })

/**
 * The body is not of a media type the route reads (JSON routes need `application/json`).
 * @since 0.1.0
 * @category errors
 */
export class UnsupportedMediaType extends UnsupportedMediaTypeBase {
  get httpStatus(): number {
    return 415
  }
}

const ConflictBase: Schema.Class<
  Conflict,
  Schema.TaggedStruct<"Conflict", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<Conflict>()("Conflict", { message: Schema.String })

/**
 * The request conflicts with the resource's current state.
 * @since 0.1.0
 * @category errors
 */
export class Conflict extends ConflictBase {
  get httpStatus(): number {
    return 409
  }
}

const NotImplementedBase: Schema.Class<
  NotImplemented,
  Schema.TaggedStruct<"NotImplemented", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<NotImplemented>()("NotImplemented", { message: Schema.String })

/**
 * The server does not provide this feature (e.g. a view over a store the app does not use).
 * @since 0.1.0
 * @category errors
 */
export class NotImplemented extends NotImplementedBase {
  get httpStatus(): number {
    return 501
  }
}

/**
 * Status codes by error tag; they win over the built-in mapping.
 * @since 0.1.0
 * @category models
 */
export type StatusMap = Readonly<Record<string, number>>

// Tidings' own input errors: the caller sent something that can never succeed.
const builtIn: StatusMap = {
  SchemaError: 400,
  InvalidEvent: 400,
  InvalidSagaInput: 400,
  SagaNotFound: 404,
  SagaConflict: 409
}

const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()

const pathOf = (path: ReadonlyArray<PropertyKey> | undefined): Array<string | number> =>
  (path ?? []).map((p) => typeof p === "number" ? p : String(p))

/**
 * The issues of a schema error, as `{ path, message }` (all of them when decoded with `errors: "all"`).
 * @since 0.1.0
 * @category combinators
 */
export const issuesOf = (error: Schema.SchemaError, prefix: ReadonlyArray<string | number> = []): Array<Issue> =>
  formatIssues(error.issue).issues.map((i) => ({
    path: [...prefix, ...pathOf(i.path as ReadonlyArray<PropertyKey> | undefined)],
    message: i.message
  }))

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

const tagOf = (error: unknown): string | undefined =>
  isRecord(error) && typeof error["_tag"] === "string" ? error["_tag"] : undefined

const validStatus = (n: unknown): n is number => typeof n === "number" && Number.isInteger(n) && n >= 400 && n <= 599

/**
 * The status of a typed error: the `statuses` map, then an `httpStatus` property on the error, then
 * Tidings' table (schema and invalid-input errors 400, `*NotFound` 404, `*Conflict` 409), then
 * `isRetryable` (store, connection, timeout) 503, else 500.
 * @since 0.1.0
 * @category combinators
 */
export const statusOf = (error: unknown, statuses: StatusMap = {}): number => {
  const tag = tagOf(error)
  if (tag !== undefined && validStatus(statuses[tag])) return statuses[tag]
  if (isRecord(error) && validStatus(error["httpStatus"])) return error["httpStatus"]
  if (tag !== undefined && builtIn[tag] !== undefined) return builtIn[tag]
  if (tag !== undefined && tag.endsWith("NotFound")) return 404
  if (tag !== undefined && tag.endsWith("Conflict")) return 409
  if (Errors.isRetryable(error)) return 503
  return 500
}

const issuesFrom = (error: unknown): ReadonlyArray<Issue> | undefined => {
  if (Schema.isSchemaError(error)) return issuesOf(error)
  if (!isRecord(error) || !Array.isArray(error["issues"])) return undefined
  return (error["issues"] as ReadonlyArray<unknown>).flatMap((i) =>
    isRecord(i) && typeof i["message"] === "string"
      ? [{
        path: Array.isArray(i["path"]) ? pathOf(i["path"] as ReadonlyArray<PropertyKey>) : [],
        message: i["message"]
      }]
      : []
  )
}

/**
 * The status and body for a typed error.
 * @since 0.1.0
 * @category combinators
 */
export const describe = (
  error: unknown,
  statuses: StatusMap = {}
): { readonly status: number; readonly body: ErrorBody } => {
  const status = statusOf(error, statuses)
  const tag = tagOf(error) ?? "Error"
  if (status >= 500 && !(error instanceof NotImplemented)) {
    return {
      status,
      body: { error: { tag, message: status === 503 ? "temporarily unavailable, retry later" : "internal error" } }
    }
  }
  const raw = isRecord(error) && typeof error["message"] === "string" && error["message"] !== ""
    ? error["message"]
    : tag
  const issues = issuesFrom(error)
  return {
    status,
    body: { error: { tag, message: raw, ...(issues === undefined || issues.length === 0 ? {} : { issues }) } }
  }
}

const retryAfter = (status: number): Record<string, string> => status === 503 ? { "retry-after": "1" } : {}

/**
 * An error response for a typed error (see {@link statusOf}).
 * @since 0.1.0
 * @category combinators
 */
export const response = (error: unknown, statuses: StatusMap = {}): Response => {
  const { body, status } = describe(error, statuses)
  return Json.response(body, status, retryAfter(status))
}

/** The body for a defect or an interruption: no details leave the process. */
const internal: ErrorBody = { error: { tag: "InternalError", message: "internal error" } }
const interrupted: ErrorBody = { error: { tag: "Interrupted", message: "the request was interrupted" } }

/**
 * Turns the failure of a handler into a response: the first typed error per {@link describe}, else
 * 500 for a defect (or 503 for an interruption). Server errors are logged with the full cause.
 * @since 0.1.0
 * @category combinators
 */
export const fromCause = <E>(cause: Cause.Cause<E>, statuses: StatusMap = {}): Effect.Effect<Response> => {
  const error = Cause.findErrorOption(cause)
  if (Option.isSome(error)) {
    const { body, status } = describe(error.value, statuses)
    // 501 is a deliberate answer, not a failure worth an error log.
    const log = status >= 500 && status !== 501 ? Effect.logError("request failed", cause) : Effect.void
    return Effect.as(log, Json.response(body, status, retryAfter(status)))
  }
  if (Cause.hasInterruptsOnly(cause)) return Effect.succeed(Json.response(interrupted, 503, retryAfter(503)))
  return Effect.as(Effect.logError("request failed with a defect", cause), Json.response(internal, 500))
}

/**
 * For `app.onError(HttpErrors.onError)`: errors thrown outside Effect handlers (a Hono middleware, a
 * hand-written route) get the same shape. Hono's `HTTPException` keeps its status.
 * @since 0.1.0
 * @category handlers
 */
export const onError: ErrorHandler = (error) => {
  const status = isRecord(error) && typeof error["getResponse"] === "function" && validStatus(error["status"])
    ? error["status"]
    : undefined
  if (status !== undefined) {
    return Json.response({
      error: { tag: "HTTPException", message: status >= 500 ? "internal error" : (error.message || "error") }
    }, status)
  }
  if (tagOf(error) !== undefined && statusOf(error) < 500) return response(error)
  // A bug or a server failure: logged here (as Hono's default handler does), never sent to the client.
  console.error(error)
  return tagOf(error) !== undefined ? response(error) : Json.response(internal, 500)
}

/**
 * For `app.notFound(HttpErrors.notFound)`: unknown routes answer 404 in the same shape.
 * @since 0.1.0
 * @category handlers
 */
export const notFound: NotFoundHandler = (c) =>
  Json.response({ error: { tag: "NotFound", message: `no route for ${c.req.method} ${c.req.path}` } }, 404)
