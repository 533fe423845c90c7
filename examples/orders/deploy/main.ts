/**
 * The orders service as a Deno Deploy-style entry: `Deno.serve` with the app's fetch handler, every
 * dependency from npm specifiers (the import map `deno.json` beside this file), no `node_modules`:
 *
 *   TIDINGS_PG_URL=postgres://... deno run -A --no-config --import-map examples/orders/deploy/deno.json examples/orders/deploy/main.ts
 *
 * (`--no-config` keeps the repository's own Deno workspace, which uses `node_modules`, out of it.)
 * The settings are the orders service's (see ../settings.ts), from the environment, plus `PORT`
 * (default 8000) and `HOSTNAME` (default 127.0.0.1); there is no embedded database here. SIGTERM or
 * SIGINT stops accepting requests, lets in-flight ones finish, then releases the layers.
 */
import { Runtime, Serve } from "@tidings/hono"
import { ConfigProvider, Effect, Layer, References } from "effect"
import * as App from "../app.ts"
import * as Settings from "../settings.ts"
import type * as Transport from "../transport.ts"
import type { DenoApi } from "./denoApi.ts"

declare const Deno: DenoApi

const say = (line: string) => console.log(`[orders] ${line}`)

const settings = await Effect.runPromise(
  Settings.load([]).pipe(
    Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: Deno.env.toObject() }))),
    Effect.catch((error) =>
      Effect.sync(() => {
        console.error(`[orders] invalid settings: ${error.message}`)
        return Deno.exit(2)
      })
    )
  )
)
if (settings === "help" || settings.pg === undefined) {
  console.error("[orders] set TIDINGS_PG_URL=postgres://... (this entry starts no database of its own)")
  Deno.exit(2)
}
const transport: Transport.Transport = settings.amqp === undefined
  ? { _tag: "memory" }
  : { _tag: "rabbitmq", connection: settings.amqp, prefix: `tidings.${settings.schema}` }
const rt = await Runtime.make(
  App.layer({ pg: settings.pg, schema: settings.schema, transport, relay: settings.relay }).pipe(
    Layer.provide(Layer.succeed(References.MinimumLogLevel, settings.logLevel))
  )
)
const app = App.routes(rt, { schema: settings.schema, adminToken: settings.adminToken })
// The signal handlers come first: "Ctrl-C stops" is printed as soon as the server listens, and a
// Ctrl-C right after it must find them.
let server: ReturnType<DenoApi["serve"]> | undefined
let stopping = false
const stop = async () => {
  if (stopping) return
  stopping = true
  await server?.shutdown()
  await rt.dispose()
  say("stopped")
  Deno.exit(0)
}
Deno.addSignalListener("SIGTERM", stop)
Deno.addSignalListener("SIGINT", stop)

server = Deno.serve({
  port: Number(Deno.env.get("PORT") ?? "8000"),
  hostname: Deno.env.get("HOSTNAME") ?? "127.0.0.1",
  onListen: ({ hostname, port }) =>
    say(
      `listening on http://${hostname}:${port} (broker: ${transport._tag}, schema "${settings.schema}"); Ctrl-C stops`
    )
}, Serve.denoHandler(app))
