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

/** One problem with a request, with the path into the input (`["body", "items", 0, "sku"]`). */
export const Issue = Schema.Struct({ path: Schema.Array(Schema.Union([Schema.String, Schema.Number])), message: Schema.String })
export type Issue = typeof Issue.Type

/** The body of every error response. */
export interface ErrorBody {
  readonly error: {
    readonly tag: string
    readonly message: string
    readonly issues?: ReadonlyArray<Issue>
  }
}

/** The request is malformed: bad JSON, a body, path or query parameter failing its schema. */
export class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", {
  message: Schema.String,
  issues: Schema.optional(Schema.Array(Issue))
}) {
  get httpStatus(): number {
    return 400
  }
}

/** No credentials, or wrong ones. */
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", { message: Schema.String }) {
  get httpStatus(): number {
    return 401
  }
}

/** The route is closed (admin routes without a configured token or middleware) or the caller may not use it. */
export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", { message: Schema.String }) {
  get httpStatus(): number {
    return 403
  }
}

/** The resource does not exist. */
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", { message: Schema.String }) {
  get httpStatus(): number {
    return 404
  }
}

/** The path exists, but not for this method (the `Allow` header lists the methods it has). */
export class MethodNotAllowed extends Schema.TaggedError<MethodNotAllowed>()("MethodNotAllowed", { message: Schema.String }) {
  get httpStatus(): number {
    return 405
  }
}

/** The request body is larger than the limit (see `Safety`); it was not read past the limit. */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", { message: Schema.String }) {
  get httpStatus(): number {
    return 413
  }
}

/** The body is not of a media type the route reads (JSON routes need `application/json`). */
export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", { message: Schema.String }) {
  get httpStatus(): number {
    return 415
  }
}

/** The request conflicts with the resource's current state. */
export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", { message: Schema.String }) {
  get httpStatus(): number {
    return 409
  }
}

/** The server does not provide this feature (e.g. a view over a store the app does not use). */
export class NotImplemented extends Schema.TaggedError<NotImplemented>()("NotImplemented", { message: Schema.String }) {
  get httpStatus(): number {
    return 501
  }
}

/** Status codes by error tag; they win over the built-in mapping. */
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

/** The issues of a schema error, as `{ path, message }` (all of them when decoded with `errors: "all"`). */
export const issuesOf = (error: Schema.SchemaError, prefix: ReadonlyArray<string | number> = []): Array<Issue> =>
  formatIssues(error.issue).issues.map((i) => ({ path: [...prefix, ...pathOf(i.path as ReadonlyArray<PropertyKey> | undefined)], message: i.message }))

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

const tagOf = (error: unknown): string | undefined => isRecord(error) && typeof error["_tag"] === "string" ? error["_tag"] : undefined

const validStatus = (n: unknown): n is number => typeof n === "number" && Number.isInteger(n) && n >= 400 && n <= 599

/**
 * The status of a typed error: the `statuses` map, then an `httpStatus` property on the error, then
 * Tidings' table (schema and invalid-input errors 400, `*NotFound` 404, `*Conflict` 409), then
 * `isRetryable` (store, connection, timeout) 503, else 500.
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
      ? [{ path: Array.isArray(i["path"]) ? pathOf(i["path"] as ReadonlyArray<PropertyKey>) : [], message: i["message"] }]
      : []
  )
}

/** The status and body for a typed error. */
export const describe = (error: unknown, statuses: StatusMap = {}): { readonly status: number; readonly body: ErrorBody } => {
  const status = statusOf(error, statuses)
  const tag = tagOf(error) ?? "Error"
  if (status >= 500 && !(error instanceof NotImplemented)) {
    return { status, body: { error: { tag, message: status === 503 ? "temporarily unavailable, retry later" : "internal error" } } }
  }
  const raw = isRecord(error) && typeof error["message"] === "string" && error["message"] !== "" ? error["message"] : tag
  const issues = issuesFrom(error)
  return { status, body: { error: { tag, message: raw, ...(issues === undefined || issues.length === 0 ? {} : { issues }) } } }
}

const retryAfter = (status: number): Record<string, string> => status === 503 ? { "retry-after": "1" } : {}

/** An error response for a typed error (see {@link statusOf}). */
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
 */
export const onError: ErrorHandler = (error) => {
  const status = isRecord(error) && typeof error["getResponse"] === "function" && validStatus(error["status"]) ? error["status"] : undefined
  if (status !== undefined) {
    return Json.response({ error: { tag: "HTTPException", message: status >= 500 ? "internal error" : (error.message || "error") } }, status)
  }
  if (tagOf(error) !== undefined && statusOf(error) < 500) return response(error)
  // A bug or a server failure: logged here (as Hono's default handler does), never sent to the client.
  console.error(error)
  return tagOf(error) !== undefined ? response(error) : Json.response(internal, 500)
}

/** For `app.notFound(HttpErrors.notFound)`: unknown routes answer 404 in the same shape. */
export const notFound: NotFoundHandler = (c) => Json.response({ error: { tag: "NotFound", message: `no route for ${c.req.method} ${c.req.path}` } }, 404)
