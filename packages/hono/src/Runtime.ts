/**
 * Runs Hono handlers with an app's Effect layers. {@link make} builds the layers once, at start
 * (so a database that cannot be reached fails the start, not the first request); every request runs
 * on that runtime; {@link Runtime.dispose} releases the layers (closing pools, stopping relays) on
 * shutdown. Nothing here depends on Node: the same code runs on Node, Deno, Bun and Cloudflare
 * Workers. On Workers a socket belongs to the request that opened it, so a pool cannot outlive the
 * request: build the runtime in the Worker's `fetch` (`make`, then `ctx.waitUntil(rt.dispose())`), as
 * `examples/edge` does; serve with `Serve` everywhere else.
 * @module
 */
import * as Tracing from "@tidings/core/Tracing"
import { Cause, Effect, Exit, type Layer, ManagedRuntime, Option, type Scope } from "effect"
import type { Context as HonoContext, Env, Handler, Input } from "hono"
import * as HttpErrors from "./HttpErrors.ts"
import * as Json from "./internal/json.ts"

/**
 * Options of {@link make}.
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Status codes by error tag for every handler of this runtime (see `HttpErrors.statusOf`). */
  readonly statuses?: HttpErrors.StatusMap
}

/**
 * Options of {@link Runtime.handler}.
 * @since 0.1.0
 * @category models
 */
export interface HandlerOptions {
  /** Status of a JSON (non-`Response`) result; default 200. `undefined` results answer 204. */
  readonly status?: number
  /** Status codes by error tag, on top of the runtime's. */
  readonly statuses?: HttpErrors.StatusMap
}

/**
 * What a handler may return: a `Response` as is, anything else as JSON.
 * @since 0.1.0
 * @category models
 */
export type Result = Response | unknown

/**
 * A built runtime: the app's services, for as long as it is not disposed.
 * @since 0.1.0
 * @category models
 */
export interface Runtime<R> {
  /** The underlying `ManagedRuntime`, for what this interface does not cover. */
  readonly managed: ManagedRuntime.ManagedRuntime<R, never>
  /** Runs an effect with the app's services; the promise rejects with the failure (a `FiberFailure`-like error). */
  readonly runPromise: <A, E>(effect: Effect.Effect<A, E, R>, options?: { readonly signal?: AbortSignal }) => Promise<A>
  /** Runs an effect and returns its `Exit`; never rejects. */
  readonly runPromiseExit: <A, E>(
    effect: Effect.Effect<A, E, R>,
    options?: { readonly signal?: AbortSignal }
  ) => Promise<Exit.Exit<A, E>>
  /**
   * A Hono handler running `f` on this runtime. A `Response` result is sent as is, `undefined` as 204,
   * anything else as JSON with `options.status`. A typed failure becomes the JSON error shape with its
   * status (see `HttpErrors`); a defect becomes 500 without details. A client that disconnects
   * interrupts the effect. Each request runs in an HTTP server span continuing the caller's
   * `traceparent`.
   */
  readonly handler: <E, P extends string = any, I extends Input = {}, V extends Env = any>(
    f: (c: HonoContext<V, P, I>) => Effect.Effect<Result, E, R>,
    options?: HandlerOptions
  ) => Handler<V, P, I>
  /** The status map of this runtime (for helpers that build their own responses). */
  readonly statuses: HttpErrors.StatusMap
  /** Releases the layers (runs their finalizers). Idempotent; later runs fail. */
  readonly dispose: () => Promise<void>
}

const serverAttributes = (url: URL): Record<string, string | number> => {
  const server = Tracing.serverOf(url.href, url.protocol === "https:" ? 443 : 80)
  return {
    ...(server.serverAddress === undefined ? {} : { "server.address": server.serverAddress }),
    ...(server.serverPort === undefined ? {} : { "server.port": server.serverPort })
  }
}

const routeOf = (c: HonoContext): string | undefined => {
  try {
    const route = c.req.routePath
    return typeof route === "string" && route !== "" && route !== "*" && route !== "/*" ? route : undefined
  } catch {
    return undefined
  }
}

/**
 * The HTTP server span of a request (OpenTelemetry HTTP conventions): `<method> <route>`, kind
 * server, continuing the caller's `traceparent` (so an order placed from a traced client is one
 * trace from the client to the consumers of its events), with the method, path, route, scheme,
 * server address and the response's status code.
 */
const serverSpan = (c: HonoContext) => <E, R>(effect: Effect.Effect<Response, E, R>): Effect.Effect<Response, E, R> => {
  const request = c.req.raw
  const method = request.method
  const route = routeOf(c)
  let url: URL | undefined
  try {
    url = new URL(request.url)
  } catch {
    url = undefined
  }
  const parent = Tracing.parentFromHeaders({
    [Tracing.traceparentHeader]: request.headers.get(Tracing.traceparentHeader) ?? undefined
  })
  return effect.pipe(
    Effect.tap((response) =>
      Effect.annotateCurrentSpan(
        response.status >= 500
          ? { "http.response.status_code": response.status, "error.type": String(response.status) }
          : { "http.response.status_code": response.status }
      )
    ),
    Effect.withSpan(route === undefined ? method : `${method} ${route}`, {
      ...Tracing.noStack,
      kind: "server",
      ...(parent === undefined ? {} : { parent }),
      attributes: {
        "http.request.method": method,
        ...(route === undefined ? {} : { "http.route": route }),
        ...(url === undefined
          ? {}
          : { "url.path": url.pathname, "url.scheme": url.protocol.replace(/:$/, ""), ...serverAttributes(url) })
      }
    })
  )
}

/**
 * Turns a handler's result into a response, in the Hono context so that headers set by middleware stay.
 * @since 0.1.0
 * @category combinators
 */
export const toResponse = (c: HonoContext, result: Result, status = 200): Response => {
  if (result instanceof Response) return result
  if (result === undefined) return c.body(null, 204)
  return c.body(Json.stringify(result), status as 200, { "content-type": Json.contentType })
}

// Requests that arrive while (or after) the layers are released: a load balancer should retry elsewhere.
const shuttingDown = () =>
  Json.response({ error: { tag: "ShuttingDown", message: "the server is shutting down" } }, 503, { "retry-after": "1" })

/**
 * Wraps an existing `ManagedRuntime` (e.g. one shared with a worker entry point); `dispose()` disposes it.
 * @since 0.1.0
 * @category combinators
 */
export const fromManaged = <R>(managed: ManagedRuntime.ManagedRuntime<R, never>, options: Options = {}): Runtime<R> => {
  const statuses = options.statuses ?? {}
  let disposed: Promise<void> | undefined
  const runPromiseExit = <A, E>(effect: Effect.Effect<A, E, R>, opts?: { readonly signal?: AbortSignal }) =>
    managed.runPromiseExit(effect, opts?.signal === undefined ? undefined : { signal: opts.signal })
  return {
    managed,
    statuses,
    runPromise: (effect, opts) =>
      managed.runPromise(effect, opts?.signal === undefined ? undefined : { signal: opts.signal }),
    runPromiseExit,
    handler: (f, handlerOptions = {}) => {
      const merged = handlerOptions.statuses === undefined ? statuses : { ...statuses, ...handlerOptions.statuses }
      return async (c) => {
        const program = Effect.suspend(() => f(c)).pipe(
          Effect.map((result) => toResponse(c as HonoContext, result, handlerOptions.status)),
          Effect.catchCause((cause) => HttpErrors.fromCause(cause, merged)),
          serverSpan(c as HonoContext)
        )
        if (disposed !== undefined) return shuttingDown()
        const exit = await runPromiseExit(program, { signal: c.req.raw.signal })
        if (Exit.isSuccess(exit)) return exit.value
        if (disposed !== undefined) return shuttingDown()
        // Only an interruption (the client went away) gets here; nobody may be listening.
        return Json.response({ error: { tag: "Interrupted", message: "the request was interrupted" } }, 503, {
          "retry-after": "1"
        })
      }
    },
    dispose: () => (disposed ??= managed.dispose())
  }
}

/**
 * Builds `layer` now and returns the runtime; rejects with the layer's error (after releasing what
 * was built) when it cannot be built. Call {@link Runtime.dispose} on shutdown.
 * @since 0.1.0
 * @category constructors
 */
export const make = async <R, E>(layer: Layer.Layer<R, E, never>, options: Options = {}): Promise<Runtime<R>> => {
  const managed = ManagedRuntime.make(layer)
  const exit = await Effect.runPromiseExit(managed.contextEffect)
  if (Exit.isFailure(exit)) {
    await managed.dispose()
    throw new RuntimeBuildError(exit.cause)
  }
  return fromManaged(managed as unknown as ManagedRuntime.ManagedRuntime<R, never>, options)
}

/**
 * The Effect variant of {@link make}: the runtime lives as long as the scope.
 * @since 0.1.0
 * @category constructors
 */
export const makeScoped = <R, E>(
  layer: Layer.Layer<R, E, never>,
  options: Options = {}
): Effect.Effect<Runtime<R>, RuntimeBuildError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({ try: () => make(layer, options), catch: (e) => e as RuntimeBuildError }),
    (rt) => Effect.promise(() => rt.dispose())
  )

/**
 * The layers given to {@link make} failed to build: `failure` is the layer's typed error (if any), `effectCause` the whole cause.
 * @since 0.1.0
 * @category errors
 */
export class RuntimeBuildError extends Error {
  override readonly name = "RuntimeBuildError"
  readonly failure: unknown
  readonly effectCause: Cause.Cause<unknown>
  constructor(effectCause: Cause.Cause<unknown>) {
    const failure = Option.getOrUndefined(Cause.findErrorOption(effectCause))
    const tag = typeof failure === "object" && failure !== null && "_tag" in failure ? String(failure._tag) : undefined
    const detail = typeof failure === "object" && failure !== null && "message" in failure
      ? String(failure.message)
      : ""
    super(
      `the app's layers failed to build: ${tag ?? (failure === undefined ? "defect" : "error")}${
        detail === "" ? "" : `: ${detail}`
      }`,
      { cause: failure ?? Cause.squash(effectCause) }
    )
    this.failure = failure
    this.effectCause = effectCause
  }
}
