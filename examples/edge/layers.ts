/**
 * The Worker's layers. On Workers a TCP socket belongs to the request (or cron event) that opened
 * it, so there is no pool to share between requests: each request builds its runtime (one
 * connection, postgres.js over `cloudflare:sockets`) and releases it when it is done. In production
 * put Hyperdrive in front of the database, which keeps those connects cheap.
 */
import { PgClient, PgOutboxStore } from "@tidings/postgres"
import { WebhookPublisher } from "@tidings/webhooks"
import { Layer } from "effect"
import { type Settings, SettingsError } from "./settings.ts"

/** One connection, for one request or one relay pass. */
const database = (settings: Settings) =>
  PgClient.layer({
    url: settings.databaseUrl,
    maxConnections: 1,
    connectTimeout: "5 seconds",
    applicationName: "tidings-edge"
  })

/** What an HTTP request needs: the SQL client and the outbox. */
export const request = (settings: Settings) =>
  PgOutboxStore.layer({ schema: settings.schema }).pipe(Layer.provideMerge(database(settings)))

/** What a relay pass needs: the outbox and the webhooks publisher (`order.*` to `WEBHOOK_URL`). */
export const relay = (settings: Settings) => {
  const webhook = settings.webhook
  if (webhook === undefined) {
    throw new SettingsError({ binding: "WEBHOOK_URL", message: "is not set: the cron trigger has nowhere to deliver" })
  }
  const publisher = WebhookPublisher.layer({
    endpoints: [{
      url: webhook.url,
      secret: webhook.secret,
      types: ["order.*"],
      name: "orders-webhook",
      concurrency: 10,
      timeout: "5 seconds"
    }]
  })
  return Layer.mergeAll(PgOutboxStore.layer({ schema: settings.schema }), publisher).pipe(
    Layer.provideMerge(database(settings))
  )
}

/** The services of a request's runtime. */
export type RequestServices = Layer.Success<ReturnType<typeof request>>
