/**
 * The Cloudflare Worker: HTTP requests write orders and their events (one transaction), and a cron
 * trigger runs a bounded relay pass that delivers due events to the webhook endpoint.
 *
 * Nothing runs at module scope (Workers allow no I/O, timers or random values there): each request
 * and each cron event builds its runtime from the bindings and releases it when done.
 */
import * as Relay from "@tidings/core/Relay"
import { Runtime } from "@tidings/hono"
import { Effect } from "effect"
import * as App from "./app.ts"
import * as Layers from "./layers.ts"
import { type Env, fromEnv, SettingsError } from "./settings.ts"

/** The parts of the Workers runtime API used here (declared, so that no Workers type package is needed). */
export interface ExecutionContext {
  waitUntil(promise: Promise<unknown>): void
}
export interface ScheduledController {
  readonly cron: string
  readonly scheduledTime: number
}

const failure = (status: number, tag: string, message: string) =>
  new Response(JSON.stringify({ error: { tag, message } }), {
    status,
    headers: { "content-type": "application/json", ...(status === 503 ? { "retry-after": "1" } : {}) }
  })

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    let settings
    try {
      settings = fromEnv(env)
    } catch (error) {
      if (!(error instanceof SettingsError)) throw error
      console.error(`tidings edge: ${error.binding} ${error.message}`)
      return failure(500, "SettingsError", "the worker is misconfigured")
    }
    let rt: Runtime.Runtime<Layers.RequestServices>
    try {
      rt = await Runtime.make(Layers.request(settings))
    } catch (error) {
      // The database cannot be reached: the client should retry (nothing was written).
      console.error("tidings edge: runtime not built:", error instanceof Error ? error.message : error)
      return failure(503, "Unavailable", "the database is unavailable")
    }
    try {
      return await App.routes(rt, settings.schema).fetch(request)
    } finally {
      ctx.waitUntil(rt.dispose())
    }
  },

  async scheduled(controller: ScheduledController, env: Env, _ctx: ExecutionContext): Promise<void> {
    const settings = fromEnv(env)
    const pass = Relay.drain({
      name: "edge",
      batchSize: 50,
      maxEvents: settings.maxEvents,
      budget: `${settings.budgetMs} millis`
    })
    // A failure (database down) rejects: Workers log the cron run as failed, and the next run tries again.
    const report = await Effect.runPromise(pass.pipe(Effect.provide(Layers.relay(settings))))
    console.log(`tidings relay pass (${controller.cron}): ${JSON.stringify(report)}`)
  }
}
