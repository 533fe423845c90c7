/**
 * Safe defaults for a Hono app: what every public Tidings service should refuse before a handler
 * runs. {@link app} (or {@link install} on an app of yours, before its routes) sets up:
 *
 * - a body limit (default 1 MiB): a larger `Content-Length` answers 413 before anything is read, and
 *   a streamed (chunked) body errors with 413 as soon as it passes the limit, whoever reads it;
 * - JSON bodies read by `Input.json` / `Command.handler` need `Content-Type: application/json` (415
 *   otherwise: a cross-site HTML form cannot post one) and are checked for depth before parsing;
 * - a path or query that is not valid percent-encoded UTF-8, or holds a NUL byte, answers 400
 *   (before any handler or database sees it, and without an error log);
 * - unknown routes answer 404, known paths with another method 405 with `Allow`, and thrown errors
 *   the JSON error shape `{ "error": { "tag", "message" } }` (`HttpErrors.onError`).
 * @module
 */
import { InvalidConfig } from "@tidings/core/Errors"
import { Hono, type MiddlewareHandler, type NotFoundHandler } from "hono"
import { TrieRouter } from "hono/router/trie-router"
import * as HttpErrors from "./HttpErrors.ts"
import * as Body from "./internal/body.ts"
import * as Json from "./internal/json.ts"

/**
 * Options of {@link middleware}, {@link install} and {@link app}.
 * @since 0.1.0
 * @category options
 */
export interface Options {
  /** Largest request body in bytes; default 1 MiB (1,048,576). */
  readonly bodyLimit?: number
  /** Deepest nesting of arrays and objects in a JSON body; default 64. */
  readonly maxJsonDepth?: number
}

const positiveInt = (path: string, value: number | undefined, fallback: number): number => {
  const n = value ?? fallback
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new InvalidConfig({ path, message: `must be a positive integer, got ${String(value)}` })
  }
  return n
}

/**
 * The limits of `options`; throws `InvalidConfig` for one that is not a positive integer.
 * @since 0.1.0
 * @category combinators
 */
export const limits = (options: Options = {}): Body.Limits => ({
  bodyLimit: positiveInt("bodyLimit", options.bodyLimit, Body.defaultBodyLimit),
  maxJsonDepth: positiveInt("maxJsonDepth", options.maxJsonDepth, Body.defaultMaxJsonDepth)
})

// True when `s` percent-decodes to valid UTF-8 without a NUL.
const decodes = (s: string): boolean => {
  if (s.includes("\0")) return false
  if (!s.includes("%")) return true
  try {
    return !decodeURIComponent(s).includes("\0")
  } catch {
    return false
  }
}

/**
 * Why the path or query of `url` cannot be used, or `undefined` when it can.
 * @since 0.1.0
 * @category combinators
 */
export const urlProblem = (url: string): string | undefined => {
  const scheme = url.indexOf("://")
  const start = url.indexOf("/", scheme < 0 ? 0 : scheme + 3)
  const rest = start < 0 ? "" : url.slice(start)
  const hash = rest.indexOf("#")
  const target = hash < 0 ? rest : rest.slice(0, hash)
  const q = target.indexOf("?")
  const path = q < 0 ? target : target.slice(0, q)
  if (!decodes(path)) return "the path is not valid percent-encoded UTF-8, or holds a NUL byte"
  if (q >= 0) {
    for (const pair of target.slice(q + 1).split("&")) {
      for (const part of pair.split("=")) {
        if (!decodes(part.replace(/\+/g, " "))) {
          return "the query is not valid percent-encoded UTF-8, or holds a NUL byte"
        }
      }
    }
  }
  return undefined
}

// Not `connection: close`: a server closing with unread data in its socket sends a reset, and the
// client may lose this answer. The runtime discards (never buffers) whatever the client still sends.
const tooLargeResponse = (limit: number): Response => HttpErrors.response(Body.tooLarge(limit))

/**
 * The request guard: 400 for a bad path or query, 413 for a body over the limit (declared, or as
 * streamed), and the limits `Input.json` reads with. Throws `InvalidConfig` for bad options.
 * @since 0.1.0
 * @category middleware
 */
export const middleware = (options: Options = {}): MiddlewareHandler => {
  const settings = limits(options)
  return async (c, next) => {
    const problem = urlProblem(c.req.url)
    if (problem !== undefined) return HttpErrors.response(new HttpErrors.BadRequest({ message: problem }))
    Body.setLimits(c, settings)
    const raw = c.req.raw
    if (raw.body !== null) {
      const declared = Body.declaredLength(raw.headers)
      if (declared !== undefined) {
        if (declared > settings.bodyLimit) return tooLargeResponse(settings.bodyLimit)
      } else {
        // Chunked: the runtime does not bound it, so count it as it is read.
        c.req.raw = new Request(
          raw,
          { body: Body.limitedStream(raw.body, settings.bodyLimit), duplex: "half" } as RequestInit
        )
      }
    }
    await next()
    // A handler that read past the limit outside `Input` (e.g. `c.req.json()`) threw PayloadTooLarge.
    if (c.error instanceof HttpErrors.PayloadTooLarge) c.res = tooLargeResponse(settings.bodyLimit)
  }
}

/**
 * A not-found handler for `app`: 405 with `Allow` when the path has routes for other methods, 404
 * otherwise, both in the JSON error shape. It reads `app.routes` when called, so routes added later
 * count.
 * @since 0.1.0
 * @category handlers
 */
export const notFound = (app: Hono<any, any, any>): NotFoundHandler => {
  let router: TrieRouter<string> | undefined
  let known = -1
  const methodsFor = (path: string): Array<string> => {
    if (router === undefined || known !== app.routes.length) {
      router = new TrieRouter<string>()
      // Middleware (`use`) and `all` routes are registered for every method: they never make a 405.
      for (const route of app.routes) if (route.method !== "ALL") router.add("ALL", route.path, route.method)
      known = app.routes.length
    }
    const methods = new Set(router.match("GET", path)[0].map(([method]) => method))
    if (methods.has("GET")) methods.add("HEAD")
    return [...methods].sort()
  }
  return (c) => {
    const allowed = methodsFor(c.req.path)
    if (allowed.length === 0 || allowed.includes(c.req.method)) return HttpErrors.notFound(c)
    return Json.response(
      {
        error: {
          tag: "MethodNotAllowed",
          message: `${c.req.method} is not allowed here; allowed: ${allowed.join(", ")}`
        }
      },
      405,
      { allow: allowed.join(", ") }
    )
  }
}

/**
 * Installs the guard (as the first middleware: call it before adding routes), the JSON error
 * handler and the 404/405 handler on `app`; returns `app`.
 * @since 0.1.0
 * @category combinators
 */
export const install = <A extends Hono<any, any, any>>(target: A, options: Options = {}): A => {
  target.use("*", middleware(options))
  target.onError(HttpErrors.onError)
  target.notFound(notFound(target))
  return target
}

/**
 * A new Hono app with {@link install} applied.
 * @since 0.1.0
 * @category constructors
 */
export const app = (options: Options = {}): Hono => install(new Hono(), options)
