/**
 * The receiver as a Hono route served over real HTTP, on a runtime with the PostgreSQL inbox:
 * signature and timestamp checks (requests signed by the reference implementation too), duplicate
 * deliveries producing one effect, and the whole path outbox → relay → webhook → inbox → effect.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import type { Message } from "@tidings/core/Message"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import * as Publisher from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import { Runtime, Serve } from "@tidings/hono"
import * as PgInboxStore from "@tidings/postgres/PgInboxStore"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { Effect, Layer, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Hono } from "hono"
import { Webhook } from "standardwebhooks"
import { freshSchema, pgClientLayer } from "../../../test/support/pg.ts"
import * as WebhookPublisher from "../src/WebhookPublisher.ts"
import * as WebhookReceiver from "../src/WebhookReceiver.ts"
import * as WebhookSignature from "../src/WebhookSignature.ts"

const secret = WebhookSignature.generateSecret()

class Declined extends Schema.TaggedError<Declined>()("Declined", { message: Schema.String }) {
  get isRetryable() {
    return false
  }
}
class Busy extends Schema.TaggedError<Busy>()("Busy", {}) {
  get isRetryable() {
    return true
  }
}

/**
 * A schema with the inbox and an `effects` table (no unique key: a second run of the handler would
 * add a second row), a Hono app receiving at /hooks on a served runtime.
 */
const service = (options: Partial<WebhookReceiver.Options> = {}) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(pgClientLayer())
    const schema = yield* freshSchema("receiver").pipe(Effect.provideContext(context))
    yield* SqlClient.SqlClient.use((sql) =>
      sql`CREATE TABLE ${sql(`${schema}.effects`)} (event_id text NOT NULL, note text)`
    ).pipe(Effect.provideContext(context))
    const layer = Layer.mergeAll(PgInboxStore.layer({ schema }), PgOutboxStore.layer({ schema })).pipe(
      Layer.provideMerge(pgClientLayer(undefined, 4))
    )
    const rt = yield* Runtime.makeScoped(layer)
    let calls = 0
    const busy = new Set<string>()
    const app = new Hono()
    app.post(
      "/hooks",
      WebhookReceiver.hono(rt, { secret, consumer: "orders-hook", ...options }, (webhook) =>
        Effect.gen(function*() {
          calls++
          const sql = yield* SqlClient.SqlClient
          yield* sql`INSERT INTO ${sql(`${schema}.effects`)} (event_id, note) VALUES (${webhook.id}, ${
            webhook.type ?? null
          })`
          const note = (webhook.data as { readonly note?: string } | undefined)?.note
          if (note === "decline") return yield* new Declined({ message: "card declined" })
          if (note === "busy-once" && !busy.has(webhook.id)) {
            busy.add(webhook.id)
            return yield* new Busy()
          }
        }))
    )
    const server = yield* Serve.scoped(app)
    const effects = (id?: string) =>
      SqlClient.SqlClient.use((sql) =>
        id === undefined
          ? sql<{ event_id: string }>`SELECT event_id FROM ${sql(`${schema}.effects`)}`
          : sql<{ event_id: string }>`SELECT event_id FROM ${sql(`${schema}.effects`)} WHERE event_id = ${id}`
      ).pipe(Effect.provideContext(context))
    return { url: `${server.url}/hooks`, effects, calls: () => calls, context }
  })

const message = (note: string): Message => ({
  id: crypto.randomUUID(),
  type: "order.placed",
  version: 1,
  aggregateType: "order",
  aggregateId: "o-1",
  orderingKey: "o-1",
  payload: { note },
  headers: {},
  occurredAt: new Date()
})

const post = (url: string, body: string, headers: Record<string, string>) =>
  Effect.promise(async () => {
    const response = await fetch(url, {
      method: "POST",
      body,
      headers: { "content-type": "application/json", ...headers }
    })
    return { status: response.status, outcome: response.headers.get("webhook-outcome"), text: await response.text() }
  })

describe("WebhookReceiver (Hono, PostgreSQL inbox)", () => {
  it.live("duplicate deliveries, in turn and at once, produce one effect", () =>
    Effect.scoped(Effect.gen(function*() {
      const svc = yield* service()
      const pub = yield* WebhookPublisher.make({ endpoints: [{ url: svc.url, secret, concurrency: 8 }] })
      const m = message("hello")
      assert.deepStrictEqual(yield* pub.publish([m]), [Publisher.published(m.id)])
      assert.deepStrictEqual(yield* pub.publish([m]), [Publisher.published(m.id)])
      // Concurrent duplicates: the inbox row lock makes all but one wait, then see it processed.
      const results = yield* Effect.forEach(Array.from({ length: 6 }), () => pub.publish([m]), {
        concurrency: "unbounded"
      })
      assert.isTrue(results.flat().every((r) => r._tag === "Published"))
      assert.strictEqual((yield* svc.effects(m.id)).length, 1)
      assert.strictEqual(svc.calls(), 1)
      // A signed request shows what the receiver made of it.
      const body = JSON.stringify({ type: "order.placed", data: { note: "hello" } })
      const headers = (id: string) => {
        const ts = new Date()
        return {
          "webhook-id": id,
          "webhook-timestamp": String(Math.floor(ts.getTime() / 1000)),
          "webhook-signature": new Webhook(secret).sign(id, ts, body)
        }
      }
      const fresh = crypto.randomUUID()
      assert.deepInclude(yield* post(svc.url, body, headers(fresh)), { status: 204, outcome: "processed" })
      assert.deepInclude(yield* post(svc.url, body, headers(fresh)), { status: 204, outcome: "duplicate" })
    })))

  it.live("verification: signed by standardwebhooks passes; tampered, unsigned, stale, future, oversized or non-JSON requests are refused before the handler", () =>
    Effect.scoped(Effect.gen(function*() {
      const svc = yield* service({ tolerance: "1 minute", maxBodyBytes: 2_000 })
      const body = JSON.stringify({ type: "order.placed", data: { note: "x" } })
      const signed = (id: string, at: Date, content = body, key = secret) => ({
        "webhook-id": id,
        "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
        "webhook-signature": new Webhook(key).sign(id, at, content)
      })
      const now = new Date()
      const id = crypto.randomUUID()
      assert.strictEqual((yield* post(svc.url, body, signed(id, now))).status, 204)
      const refused = [
        [body.replace("x", "y"), signed(crypto.randomUUID(), now), 401],
        [body, signed(crypto.randomUUID(), now, body, WebhookSignature.generateSecret()), 401],
        [body, { ...signed(crypto.randomUUID(), now), "webhook-signature": "v1,AAAA" }, 401],
        [body, { "webhook-id": crypto.randomUUID() }, 400],
        [body, signed(crypto.randomUUID(), new Date(now.getTime() - 120_000)), 400],
        [body, signed(crypto.randomUUID(), new Date(now.getTime() + 120_000)), 400],
        ["x".repeat(3_000), signed(crypto.randomUUID(), now, "x".repeat(3_000)), 413],
        ["not json", signed(crypto.randomUUID(), now, "not json"), 400]
      ] as const
      for (const [content, headers, status] of refused) {
        const answer = yield* post(svc.url, content, headers)
        assert.strictEqual(answer.status, status, answer.text)
        assert.strictEqual(JSON.parse(answer.text).error.tag, "WebhookRejected")
      }
      assert.strictEqual(svc.calls(), 1)
      assert.deepStrictEqual((yield* svc.effects()).map((r) => r.event_id), [id])
    })))

  it.live("secret rotation: a receiver holding the old and the new secret accepts either", () =>
    Effect.scoped(Effect.gen(function*() {
      const next = WebhookSignature.generateSecret()
      const svc = yield* service({ secret: [secret, next] })
      const oldPub = yield* WebhookPublisher.make({ endpoints: [{ url: svc.url, secret }] })
      const newPub = yield* WebhookPublisher.make({ endpoints: [{ url: svc.url, secret: next }] })
      const a = message("a")
      const b = message("b")
      assert.deepStrictEqual([...(yield* oldPub.publish([a])), ...(yield* newPub.publish([b]))], [
        Publisher.published(a.id),
        Publisher.published(b.id)
      ])
      assert.strictEqual((yield* svc.effects()).length, 2)
    })))

  it.live("end to end: outbox → relay → webhook → inbox; a retryable handler failure is retried (503), a permanent one fails the event (422) and leaves no effect", () =>
    Effect.scoped(Effect.gen(function*() {
      const svc = yield* service()
      const OrderPlaced = Event.define("order.placed", {
        aggregateType: "order",
        schema: Schema.Struct({ note: Schema.String })
      })
      const outboxSchema = yield* freshSchema("sender").pipe(Effect.provideContext(svc.context))
      const store = yield* PgOutboxStore.make({ schema: outboxSchema }).pipe(Effect.provideContext(svc.context))
      yield* Layer.build(
        Relay.layer({
          statsInterval: false,
          retention: false,
          retry: Schedule.spaced("50 millis"),
          pollInterval: { base: "20 millis", max: "100 millis" }
        }).pipe(
          Layer.provide(
            Layer.mergeAll(
              Layer.succeed(OutboxStore)(store),
              WebhookPublisher.layer({ endpoints: [{ url: svc.url, secret }] })
            )
          )
        )
      )
      const append = (note: string) =>
        Outbox.transaction(Outbox.append(OrderPlaced, { aggregateId: `o-${note}`, payload: { note } })).pipe(
          Effect.provideService(OutboxStore, store)
        )
      const busy = yield* append("busy-once")
      const fine = yield* append("fine")
      const declined = yield* append("decline")
      yield* store.stats.pipe(
        Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (s) => s.published === 2 && s.failed === 1 }),
        Effect.timeoutOrElse({ duration: "60 seconds", orElse: () => Effect.die(new Error("events not settled")) })
      )
      assert.sameMembers((yield* svc.effects()).map((r) => r.event_id), [busy.id, fine.id])
      const [failed] = yield* store.listFailed({ limit: 10 })
      assert.strictEqual(failed!.message.id, declined.id)
      assert.include(failed!.lastError!, "answered HTTP 422")
      assert.include(failed!.lastError!, "Declined")
      assert.include(failed!.lastError!, "card declined")
    })))
})
