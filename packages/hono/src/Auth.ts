/**
 * Guards for the admin routes. They are closed by default: a route given no guard answers 403.
 * Give either a bearer token ({@link bearer}, compared in constant time) or your own Hono middleware
 * (session, OIDC, mTLS header, IP allow list, ...).
 * @module
 */
import { Redacted } from "effect"
import type { Context, MiddlewareHandler } from "hono"
import { InvalidConfig } from "@tidings/core/Errors"
import * as HttpErrors from "./HttpErrors.ts"
import { equal } from "./internal/constantTime.ts"

/** How an admin route is guarded: a bearer token, a middleware, or nothing (closed: 403). */
export type Guard = Redacted.Redacted<string> | MiddlewareHandler | undefined

/** Answers every request with 403: the route is disabled until a token or a middleware is configured. */
export const closed: MiddlewareHandler = async () =>
  HttpErrors.response(new HttpErrors.Forbidden({ message: "admin routes are disabled: configure a token or an auth middleware" }))

const unauthorized = (message: string) => {
  const response = HttpErrors.response(new HttpErrors.Unauthorized({ message }))
  response.headers.set("www-authenticate", "Bearer realm=\"tidings\"")
  return response
}

/** The shortest admin token {@link bearer} accepts: 32 characters (e.g. 24 random bytes in base64). */
export const minTokenLength = 32

/**
 * Accepts requests with `Authorization: Bearer <token>` equal to `token`; 401 otherwise. Throws
 * `InvalidConfig` at once for a token shorter than {@link minTokenLength} or holding whitespace: a
 * short token can be guessed, an empty one would open the routes to anyone.
 */
export const bearer = (token: Redacted.Redacted<string>): MiddlewareHandler => {
  const expected = Redacted.value(token)
  if (typeof expected !== "string" || expected.length < minTokenLength || /\s/.test(expected)) {
    throw new InvalidConfig({
      path: "auth",
      message: `the admin token must be at least ${minTokenLength} characters without whitespace (e.g. openssl rand -base64 24)`
    })
  }
  return async (c, next) => {
    const header = c.req.header("authorization")
    const match = header === undefined ? null : /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header)
    if (match === null) return unauthorized("missing bearer token")
    if (!(await equal(match[1]!, expected))) return unauthorized("invalid token")
    await next()
  }
}

/**
 * Whether the guard's middleware lets this request through, without answering it: for routes that
 * show more to an admin (`/ready`'s details). No guard lets nobody through.
 */
export const allows = async (middleware: MiddlewareHandler | undefined, c: Context): Promise<boolean> => {
  if (middleware === undefined) return false
  let passed = false
  await middleware(c, async () => {
    passed = true
  })
  return passed
}

/** The middleware of a guard: {@link bearer} for a token, the middleware itself, or {@link closed}. */
export const middleware = (guard: Guard): MiddlewareHandler =>
  guard === undefined ? closed : Redacted.isRedacted(guard) ? bearer(guard as Redacted.Redacted<string>) : guard
