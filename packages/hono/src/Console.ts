/**
 * The operator console: a web page, shipped prebuilt in this package (no build step for users), and
 * the JSON API it calls. Mount it with `app.route("/admin/console", Console.routes(rt, { auth }))`.
 *
 * The page asks for the admin token (the same as the admin routes'), keeps it in the tab's session
 * storage and sends it as `Authorization: Bearer`, never in a cookie; without a configured `auth`
 * the API answers 403. It refreshes by itself and shows the outbox (counts by status, oldest
 * pending age, throughput per minute, failed events with retry, discard and bulk retry by type), the
 * inbox's dead letters with replay, the broker's dead-letter queues with replay (given a
 * {@link DeadLetterQueues} port, e.g. `@tidings/rabbitmq`'s `DeadLetters`), sagas with filters, a
 * timeline per saga and retry / compensate, and the relays, consumers and components with their
 * state. Views whose store the app does not provide are left out.
 * @module
 */
import type * as Health from "@tidings/core/Health"
import { Hono } from "hono"
import * as Auth from "./Auth.ts"
import * as Api from "./internal/consoleApi.ts"
import * as Assets from "./internal/consoleAssets.ts"
import type { DeadLetterQueues } from "./internal/deadLetterQueues.ts"
import type { Runtime } from "./Runtime.ts"

export type { DeadLetterMessage, DeadLetterQueue, DeadLetterQueues } from "./internal/deadLetterQueues.ts"

/**
 * Options of {@link routes}.
 * @since 0.1.0
 * @category options
 */
export interface Options<R = never> {
  /** The admin guard: a bearer token (`Redacted`, at least 32 characters) or a middleware. Without one the API answers 403. */
  readonly auth?: Auth.Guard
  /** The components shown up / down (the readiness checks: database, broker, relay). */
  readonly checks?: ReadonlyArray<Health.Check<R>>
  /** The broker's dead-letter queues (run with the app's services); without it that view is left out. */
  readonly deadLetterQueues?: DeadLetterQueues<R>
  /** How often the page refreshes (default 2 s; 500 ms to 1 min). */
  readonly refreshIntervalMs?: number
  /** Minutes of throughput shown (default 15; 1 to 180). */
  readonly throughputMinutes?: number
  /** The largest `limit` a list accepts (default 500). */
  readonly maxLimit?: number
}

const bounded = (name: string, value: number | undefined, fallback: number, min: number, max: number): number => {
  const n = value ?? fallback
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new Error(`Console: ${name} must be an integer from ${min} to ${max}, got ${String(value)}`)
  }
  return n
}

const escapeHtml = (text: string) =>
  text.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

// The page loads nothing but its own script and style, and talks only to its own API.
const pageHeaders = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'self'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store"
}

/**
 * The console under the prefix it is mounted at: `GET /` (the page, also `/index.html`; mounted at
 * `/admin/console`, it is `/admin/console` without a trailing slash), `/console.js`, `/console.css`,
 * and the JSON API under `/api` (guarded by `auth`).
 * @since 0.1.0
 * @category routes
 */
export const routes = <R>(runtime: Runtime<R>, options: Options<NoInfer<R>> = {}): Hono => {
  const settings: Api.Settings = {
    checks: options.checks ?? [],
    deadLetterQueues: options.deadLetterQueues,
    refreshIntervalMs: bounded("refreshIntervalMs", options.refreshIntervalMs, 2000, 500, 60_000),
    throughputMinutes: bounded("throughputMinutes", options.throughputMinutes, 15, 1, 180),
    maxLimit: bounded("maxLimit", options.maxLimit, 500, 1, 10_000)
  }
  const app = new Hono()
  const page = (path: string) => {
    // The page's script and style are under the mount point; the script finds the API next to itself.
    const base = path.endsWith("/") ? path : `${path}/`
    // Not a <base> element: it would also move the page's #fragment links to the mount point.
    const html = Assets.html.replace("href=\"console.css\"", `href="${escapeHtml(base)}console.css"`).replace(
      "src=\"console.js\"",
      `src="${escapeHtml(base)}console.js"`
    )
    return new Response(html, {
      headers: { ...pageHeaders, "content-type": "text/html; charset=utf-8" }
    })
  }
  app.get("/", (c) => page(c.req.path))
  app.get("/index.html", (c) => page(c.req.path.slice(0, -"index.html".length)))
  app.get(
    "/console.js",
    () => new Response(Assets.js, { headers: { ...pageHeaders, "content-type": "text/javascript; charset=utf-8" } })
  )
  app.get(
    "/console.css",
    () => new Response(Assets.css, { headers: { ...pageHeaders, "content-type": "text/css; charset=utf-8" } })
  )
  const api = new Hono()
  api.use("*", Auth.middleware(options.auth))
  api.use("*", async (c, next) => {
    await next()
    c.res.headers.set("cache-control", "no-store")
  })
  Api.register(api, runtime as Runtime<any>, settings)
  app.route("/api", api)
  return app
}
