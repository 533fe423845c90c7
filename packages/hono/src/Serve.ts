/**
 * Serves a fetch handler (a Hono app) on a port, with the same code on every server runtime:
 * `Deno.serve` on Deno, `Bun.serve` on Bun, `@hono/node-server` on Node (an optional peer
 * dependency, imported only there). Cloudflare Workers have no server to start: export the app's
 * `fetch` from the Worker module instead (see `examples/edge`); `serve` there is a `ServeError`.
 * @module
 */
import type { InvalidConfig } from "@tidings/core/Errors"
import * as Settings from "@tidings/core/Settings"
import { Context, Effect, Layer, Schema, type Scope } from "effect"
import { deno } from "./internal/deno.ts"

/**
 * Anything with a fetch handler: a Hono app, or a plain function.
 * @since 0.1.0
 * @category models
 */
export type Fetchable =
  | { readonly fetch: (request: Request) => Response | Promise<Response> }
  | ((request: Request) => Response | Promise<Response>)

/**
 * Options of {@link serve}.
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Port to listen on; 0 (the default) picks a free one (read it from {@link Server.port}). */
  readonly port?: number
  /** Interface to bind; default `127.0.0.1` (pass `0.0.0.0` to accept outside connections). */
  readonly hostname?: string
  /**
   * How long `close()` waits for in-flight requests before cutting the remaining connections
   * (default 10 s).
   */
  readonly gracePeriodMs?: number
}

/**
 * A listening server.
 * @since 0.1.0
 * @category models
 */
export interface Server {
  readonly port: number
  readonly hostname: string
  /** `http://<hostname>:<port>` */
  readonly url: string
  /** Stops accepting connections, lets in-flight requests finish (up to the grace period), then resolves. Idempotent. */
  readonly close: () => Promise<void>
}

/**
 * The server could not listen (port in use, permission denied, `@hono/node-server` missing on Node, a Worker).
 * @since 0.1.0
 * @category errors
 */
export class ServeError extends Error {
  override readonly name = "ServeError"
}

interface NodeServer {
  address(): { readonly port: number } | string | null
  close(callback?: (error?: Error) => void): void
  closeAllConnections?: () => void
  closeIdleConnections?: () => void
  once(event: "error", listener: (error: Error) => void): void
  off(event: "error", listener: (error: Error) => void): void
}

interface NodeServerModule {
  readonly serve: (
    options: { readonly fetch: (request: Request) => unknown; readonly port: number; readonly hostname: string },
    listening?: (info: { readonly port: number }) => void
  ) => NodeServer
}

/** The part of Bun's API used here, declared so that the package type-checks without Bun's types. */
interface BunServer {
  readonly port: number
  stop(closeActiveConnections?: boolean): Promise<void> | void
}
interface BunNamespace {
  serve(options: {
    readonly port: number
    readonly hostname: string
    readonly idleTimeout?: number
    readonly fetch: (request: Request) => Response | Promise<Response>
  }): BunServer
}

/**
 * Which server this runtime has.
 * @since 0.1.0
 * @category models
 */
export type ServerRuntime = "deno" | "bun" | "node" | "workers"

/**
 * The runtime this code runs on, as far as serving goes.
 * @since 0.1.0
 * @category combinators
 */
export const runtime = (): ServerRuntime => {
  const g = globalThis as { readonly Bun?: unknown; readonly navigator?: { readonly userAgent?: string } }
  if (deno() !== undefined) return "deno"
  if (g.Bun !== undefined) return "bun"
  if (g.navigator?.userAgent === "Cloudflare-Workers") return "workers"
  return "node"
}

const toFetch = (app: Fetchable): (request: Request) => Response | Promise<Response> =>
  typeof app === "function" ? app : (request) => app.fetch(request)

const validate = (options: Options): { port: number; hostname: string; grace: number } => {
  const port = options.port ?? 0
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new ServeError(`port must be an integer from 0 to 65535, got ${String(options.port)}`)
  }
  const grace = options.gracePeriodMs ?? 10_000
  if (!Number.isFinite(grace) || grace < 0) {
    throw new ServeError(`gracePeriodMs must be a non-negative number, got ${String(options.gracePeriodMs)}`)
  }
  return { port, hostname: options.hostname ?? "127.0.0.1", grace }
}

const hostForUrl = (hostname: string) => hostname.includes(":") ? `[${hostname}]` : hostname

const withTimeout = (promise: Promise<void>, ms: number, onTimeout: () => void): Promise<void> =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      onTimeout()
      resolve()
    }, ms)
    promise.then(() => {
      clearTimeout(timer)
      resolve()
    }, (error: unknown) => {
      clearTimeout(timer)
      reject(error)
    })
  })

/**
 * A `Deno.serve` handler for an app, for entries that call `Deno.serve` themselves (Deno Deploy).
 * Deno's own `request.signal` also aborts after a successful response (and warns once that it
 * does): the app gets a signal that aborts only when the response was not delivered, so that a
 * client going away still interrupts its handler.
 * @since 0.1.0
 * @category combinators
 */
export const denoHandler = (
  app: Fetchable
): (request: Request, info?: { readonly completed?: Promise<void> }) => Response | Promise<Response> => {
  const fetch = toFetch(app)
  return (request: Request, info?: { readonly completed?: Promise<void> }): Response | Promise<Response> => {
    const delivered = new AbortController()
    info?.completed?.catch(() => delivered.abort())
    const hasBody = request.method !== "GET" && request.method !== "HEAD"
    // Built from parts: copying the request itself would read (and trip) its signal.
    return fetch(
      new Request(request.url, {
        method: request.method,
        headers: request.headers,
        signal: delivered.signal,
        ...(hasBody ? { body: request.body, duplex: "half" } : {})
      } as RequestInit)
    )
  }
}

const serveDeno = (
  fetch: (request: Request) => Response | Promise<Response>,
  port: number,
  hostname: string,
  grace: number
): Promise<Server> => {
  const Deno = deno()!
  return new Promise<Server>((resolve, reject) => {
    const abort = new AbortController()
    try {
      const server = Deno.serve({
        port,
        hostname,
        signal: abort.signal,
        onListen: () => undefined // Deno prints "Listening on ..." otherwise
      }, denoHandler(fetch))
      let closing: Promise<void> | undefined
      resolve({
        port: server.addr.port,
        hostname,
        url: `http://${hostForUrl(hostname)}:${server.addr.port}`,
        // shutdown() waits for in-flight requests; the abort signal cuts whatever remains after the grace period.
        close: () => (closing ??= withTimeout(server.shutdown(), grace, () => abort.abort()))
      })
    } catch (error) {
      reject(
        new ServeError(
          `cannot listen on ${hostname}:${port}: ${error instanceof Error ? error.message : String(error)}`,
          { cause: error }
        )
      )
    }
  })
}

const serveBun = (
  fetch: (request: Request) => Response | Promise<Response>,
  port: number,
  hostname: string,
  grace: number
): Promise<Server> => {
  const Bun = (globalThis as unknown as { readonly Bun: BunNamespace }).Bun
  try {
    // Bun closes a connection after 10 s without bytes by default, a slow handler's included: the
    // longest it allows instead.
    const server = Bun.serve({ port, hostname, idleTimeout: 255, fetch })
    let closing: Promise<void> | undefined
    return Promise.resolve({
      port: server.port,
      hostname,
      url: `http://${hostForUrl(hostname)}:${server.port}`,
      // stop() stops listening and resolves once in-flight requests are done; stop(true) cuts them.
      close: () => (closing ??= withTimeout(Promise.resolve(server.stop()), grace, () => void server.stop(true)))
    })
  } catch (error) {
    return Promise.reject(
      new ServeError(
        `cannot listen on ${hostname}:${port}: ${error instanceof Error ? error.message : String(error)}`,
        { cause: error }
      )
    )
  }
}

const serveNode = async (
  fetch: (request: Request) => Response | Promise<Response>,
  port: number,
  hostname: string,
  grace: number
): Promise<Server> => {
  let mod: NodeServerModule
  try {
    // A variable specifier keeps bundlers for other runtimes from resolving it.
    const specifier = "@hono/node-server"
    mod = await import(specifier) as NodeServerModule
  } catch (error) {
    throw new ServeError(
      "serving on Node needs the @hono/node-server package (an optional peer dependency): install it",
      { cause: error }
    )
  }
  return new Promise<Server>((resolve, reject) => {
    let server: NodeServer
    const onError = (error: Error) =>
      reject(new ServeError(`cannot listen on ${hostname}:${port}: ${error.message}`, { cause: error }))
    try {
      server = mod.serve({ fetch, port, hostname }, (info) => {
        server.off("error", onError)
        let closing: Promise<void> | undefined
        resolve({
          port: info.port,
          hostname,
          url: `http://${hostForUrl(hostname)}:${info.port}`,
          close: () => (closing ??= withTimeout(
            new Promise<void>((done) => {
              // Keep-alive connections would hold close() open until their timeout: close each one as
              // soon as it has no request in flight (those finishing later become idle later).
              const sweep = setInterval(() => server.closeIdleConnections?.(), 25)
              server.close(() => {
                clearInterval(sweep)
                done()
              })
              server.closeIdleConnections?.()
            }),
            grace,
            () => server.closeAllConnections?.()
          ))
        })
      })
      server.once("error", onError)
    } catch (error) {
      reject(
        new ServeError(
          `cannot listen on ${hostname}:${port}: ${error instanceof Error ? error.message : String(error)}`,
          { cause: error }
        )
      )
    }
  })
}

/**
 * Listens on `options.port` (default: a free port) on `options.hostname` (default `127.0.0.1`) and
 * resolves once the server accepts connections.
 * @since 0.1.0
 * @category combinators
 */
export const serve = (app: Fetchable, options: Options = {}): Promise<Server> => {
  let settings: ReturnType<typeof validate>
  try {
    settings = validate(options)
  } catch (error) {
    return Promise.reject(error)
  }
  const fetch = toFetch(app)
  switch (runtime()) {
    case "deno":
      return serveDeno(fetch, settings.port, settings.hostname, settings.grace)
    case "bun":
      return serveBun(fetch, settings.port, settings.hostname, settings.grace)
    case "workers":
      return Promise.reject(
        new ServeError("a Cloudflare Worker does not listen: export { fetch: app.fetch } from the Worker module")
      )
    case "node":
      return serveNode(fetch, settings.port, settings.hostname, settings.grace)
  }
}

/**
 * {@link serve} as a scoped resource: listening until the scope closes.
 * @since 0.1.0
 * @category combinators
 */
export const scoped = (app: Fetchable, options: Options = {}): Effect.Effect<Server, ServeError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => serve(app, options),
      catch: (e) => e instanceof ServeError ? e : new ServeError(String(e), { cause: e })
    }),
    (server) => Effect.promise(() => server.close())
  )

/**
 * The data of {@link Options} as a schema (what {@link layerConfig} reads from the environment).
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema: Schema.Struct<{
  readonly port: Schema.withDecodingDefault<Schema.Codec<number>>
  readonly hostname: Schema.withDecodingDefault<Schema.String>
  readonly gracePeriodMs: Schema.withDecodingDefault<Schema.Codec<number>>
}> = Schema.Struct({
  port: Settings.int(0, 65535).pipe(Schema.withDecodingDefault(Effect.succeed(0))),
  hostname: Schema.String.check(Schema.isMinLength(1)).pipe(Schema.withDecodingDefault(Effect.succeed("127.0.0.1"))),
  gracePeriodMs: Settings.int(0, 3_600_000).pipe(Schema.withDecodingDefault(Effect.succeed(10_000)))
})

/**
 * The server's environment variables: `TIDINGS_HTTP_PORT`, `TIDINGS_HTTP_HOSTNAME`,
 * `TIDINGS_HTTP_GRACE_PERIOD_MS`.
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = {
  component: "Serve",
  schema: ConfigSchema,
  prefix: "TIDINGS_HTTP"
}

/**
 * The server's options from the environment (`TIDINGS_HTTP_*`, or `options.prefix`) on top of
 * `options.defaults`.
 * @since 0.1.0
 * @category settings
 */
export const config = (options: Settings.EnvironmentOptions<Options> = {}): Effect.Effect<Options, InvalidConfig> =>
  Settings.read(environment, options)

// Typed apart from the class, so that JSR's fast check reads it (no slow type).
const ListeningKey: Context.ServiceClass<Listening, "@tidings/hono/Serve/Listening", Server> = Context.Service<
  Listening,
  Server
>()("@tidings/hono/Serve/Listening")

/**
 * The listening server of {@link layer}.
 * @since 0.1.0
 * @category services
 */
export class Listening extends ListeningKey {}

/**
 * Serves `app` while the layer lives (closing it lets in-flight requests finish, up to the grace
 * period).
 * @since 0.1.0
 * @category layers
 */
export const layer = (app: Fetchable, options: Options = {}): Layer.Layer<Listening, ServeError> =>
  Layer.effect(Listening, scoped(app, options))

/**
 * {@link layer} with its options from the environment ({@link config}); a wrong variable fails with
 * one `InvalidConfig` naming every wrong variable.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  app: Fetchable,
  options: Settings.EnvironmentOptions<Options> = {}
): Layer.Layer<Listening, ServeError | InvalidConfig> => Layer.unwrap(Effect.map(config(options), (o) => layer(app, o)))
