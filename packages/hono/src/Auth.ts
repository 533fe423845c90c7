/**
 * Guards for the admin routes. They are closed by default: a route given no guard answers 403.
 * Give either a bearer token ({@link bearer}, compared in constant time) or your own Hono middleware
 * (session, OIDC, mTLS header, IP allow list, ...).
 * @module
 */
import { InvalidConfig } from "@tidings/core/Errors"
import * as Settings from "@tidings/core/Settings"
import { Context as EffectContext, Effect, Layer, Redacted, Schema } from "effect"
import type { Context, MiddlewareHandler } from "hono"
import * as HttpErrors from "./HttpErrors.ts"
import { equal } from "./internal/constantTime.ts"

/**
 * How an admin route is guarded: a bearer token, a middleware, or nothing (closed: 403).
 * @since 0.1.0
 * @category models
 */
export type Guard = Redacted.Redacted<string> | MiddlewareHandler | undefined

/**
 * Answers every request with 403: the route is disabled until a token or a middleware is configured.
 * @since 0.1.0
 * @category combinators
 */
export const closed: MiddlewareHandler = async () =>
  HttpErrors.response(
    new HttpErrors.Forbidden({ message: "admin routes are disabled: configure a token or an auth middleware" })
  )

const unauthorized = (message: string) => {
  const response = HttpErrors.response(new HttpErrors.Unauthorized({ message }))
  response.headers.set("www-authenticate", "Bearer realm=\"tidings\"")
  return response
}

/**
 * The shortest admin token {@link bearer} accepts: 32 characters (e.g. 24 random bytes in base64).
 * @since 0.1.0
 * @category combinators
 */
export const minTokenLength = 32

/**
 * Accepts requests with `Authorization: Bearer <token>` equal to `token`; 401 otherwise. Throws
 * `InvalidConfig` at once for a token shorter than {@link minTokenLength} or holding whitespace: a
 * short token can be guessed, an empty one would open the routes to anyone.
 * @since 0.1.0
 * @category combinators
 */
export const bearer = (token: Redacted.Redacted<string>): MiddlewareHandler => {
  const expected = Redacted.value(token)
  if (typeof expected !== "string" || expected.length < minTokenLength || /\s/.test(expected)) {
    throw new InvalidConfig({
      path: "auth",
      message:
        `the admin token must be at least ${minTokenLength} characters without whitespace (e.g. openssl rand -base64 24)`
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
 * @since 0.1.0
 * @category combinators
 */
export const allows = async (middleware: MiddlewareHandler | undefined, c: Context): Promise<boolean> => {
  if (middleware === undefined) return false
  let passed = false
  await middleware(c, async () => {
    passed = true
  })
  return passed
}

/**
 * The middleware of a guard: {@link bearer} for a token, the middleware itself, or {@link closed}.
 * @since 0.1.0
 * @category combinators
 */
export const middleware = (guard: Guard): MiddlewareHandler =>
  guard === undefined ? closed : Redacted.isRedacted(guard) ? bearer(guard as Redacted.Redacted<string>) : guard

/**
 * The admin token as a setting: a secret of at least {@link minTokenLength} characters without
 * whitespace; absent, the admin routes stay closed.
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema: Schema.Struct<{
  readonly token: Schema.optional<Schema.Codec<Redacted.Redacted<string>, string | Redacted.Redacted<string>>>
}> = Schema.Struct({
  token: Schema.optional(Settings.secret({
    check: (token) =>
      token.length >= minTokenLength && !/\s/.test(token)
        ? undefined
        : `must be at least ${minTokenLength} characters without whitespace (e.g. openssl rand -base64 24)`
  }))
})

/**
 * The admin token's environment variable: `TIDINGS_ADMIN_TOKEN`.
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = {
  component: "Auth",
  schema: ConfigSchema,
  prefix: "TIDINGS_ADMIN"
}

// Typed apart from the class, so that JSR's fast check reads it (no slow type).
const AdminTokenKey: EffectContext.ServiceClass<
  AdminToken,
  "@tidings/hono/Auth/AdminToken",
  { readonly token: Redacted.Redacted<string> | undefined }
> = EffectContext.Service<AdminToken, { readonly token: Redacted.Redacted<string> | undefined }>()(
  "@tidings/hono/Auth/AdminToken"
)

/**
 * The admin token of the app (`undefined`: none configured, the admin routes are closed), for
 * routes built inside the app's layers.
 * @since 0.1.0
 * @category services
 */
export class AdminToken extends AdminTokenKey {}

/**
 * The admin token from the environment (`TIDINGS_ADMIN_TOKEN`, or `<prefix>_TOKEN`), checked:
 * `undefined` when it is not set.
 * @since 0.1.0
 * @category settings
 */
export const config = (
  options: { readonly prefix?: string } = {}
): Effect.Effect<Redacted.Redacted<string> | undefined, InvalidConfig> =>
  Effect.map(Settings.read(environment, options), (s) => s.token)

/**
 * Provides {@link AdminToken} from the environment ({@link config}); a token that is too short
 * fails the layer with an `InvalidConfig` naming `TIDINGS_ADMIN_TOKEN`.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (options: { readonly prefix?: string } = {}): Layer.Layer<AdminToken, InvalidConfig> =>
  Layer.effect(AdminToken, Effect.map(config(options), (token) => AdminToken.of({ token })))
