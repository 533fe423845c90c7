/**
 * The webhook publisher against a real HTTP receiver on 127.0.0.1: signatures checked by the
 * reference implementation, every status class, timeouts, a receiver that is down, per-endpoint
 * concurrency, routing by type; then the relay on PostgreSQL publishing through it (Retry-After, a
 * 404 recorded, a receiver that is down and comes back).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import type { Message } from "@tidings/core/Message"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import * as Publisher from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { Duration, Effect, Fiber, Layer, Option, Schedule, Schema, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import { freshSchema, pgClientLayer } from "../../../test/support/pg.ts"
import * as WebhookPublisher from "../src/WebhookPublisher.ts"
import * as WebhookSignature from "../src/WebhookSignature.ts"
import { type Answer, type Received, type Receiver, startReceiver, until } from "./receiver.ts"

const secret = WebhookSignature.generateSecret()

let seq = 0
const message = (type: string, aggregateId = `agg-${++seq}`, headers: Record<string, string> = {}): Message => ({
  id: crypto.randomUUID(),
  type,
  version: 1,
  aggregateType: "order",
  aggregateId,
  orderingKey: aggregateId,
  payload: { orderId: aggregateId, totalCents: 1250 },
  headers,
  occurredAt: new Date("2026-11-26T10:00:00.000Z")
})

const receiver = (answer?: (r: Received) => Answer | Promise<Answer>, port?: number) =>
  Effect.acquireRelease(
    Effect.promise(() => startReceiver(secret, answer, port)),
    (r) => Effect.promise(() => r.close())
  )

const publisher = (config: WebhookPublisher.Config) => WebhookPublisher.make(config).pipe(Effect.orDie)

const rejection = (result: Publisher.PublishResult) => {
  assert.strictEqual(result._tag, "Rejected")
  return (result as Extract<Publisher.PublishResult, { _tag: "Rejected" }>).error
}

const waitFor = (what: string, check: () => boolean | Promise<boolean>) => Effect.promise(() => until(what, check))

describe("WebhookPublisher over HTTP", () => {
  it.live("2xx publishes; requests are POSTs signed per Standard Webhooks with the default body", () =>
    Effect.gen(function*() {
      const r = yield* receiver((req) => ({ status: [200, 201, 204][req.n % 3]! }))
      const pub = yield* publisher({ endpoints: [{ url: r.url, secret }] })
      const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
      const messages = [
        message("order.placed", "o-1", { traceparent, secret: "internal" }),
        message("order.paid"),
        message("order.shipped")
      ]
      const results = yield* pub.publish(messages)
      assert.deepStrictEqual(results, messages.map((m) => Publisher.published(m.id)))
      assert.strictEqual(r.received.length, 3)
      for (const got of r.received) assert.isTrue(got.verified, "standardwebhooks accepts the signature")
      const first = r.received.find((x) => x.id === messages[0]!.id)!
      assert.deepStrictEqual(first.json, {
        id: messages[0]!.id,
        type: "order.placed",
        version: 1,
        timestamp: "2026-11-26T10:00:00.000Z",
        aggregateType: "order",
        aggregateId: "o-1",
        data: { orderId: "o-1", totalCents: 1250 }
      })
      assert.strictEqual(first.headers["content-type"], "application/json")
      assert.strictEqual(first.headers["user-agent"], "tidings-webhooks")
      assert.strictEqual(first.headers["traceparent"], traceparent)
      // Only the trace context leaves the process, not the message's other headers.
      assert.isUndefined(first.headers["secret"])
      assert.approximately(Number(first.headers["webhook-timestamp"]), Date.now() / 1000, 60)
    }))

  it.live("each status class: 408, 429 and 5xx retry; 3xx and other 4xx fail with the status and a bounded excerpt of the body", () =>
    Effect.gen(function*() {
      const statuses = [200, 299, 408, 429, 500, 502, 503, 504, 301, 400, 401, 403, 404, 409, 410, 413, 422]
      const r = yield* receiver((req) => {
        const status = Number(req.json.aggregateId)
        return status === 301
          ? { status, headers: { location: "http://127.0.0.1:1/elsewhere" } }
          : {
            status,
            body: status === 404 ? "no such order ".repeat(1000) : status >= 400 ? `{"error":"status ${status}"}` : ""
          }
      })
      const pub = yield* publisher({
        endpoints: [{ url: r.url, secret, name: "orders-hook", concurrency: 4 }],
        errorBodyBytes: 100
      })
      const messages = statuses.map((s) => message("order.placed", String(s)))
      const results = yield* pub.publish(messages)
      results.forEach((result, i) => {
        const status = statuses[i]!
        if (status < 300) return assert.deepStrictEqual(result, Publisher.published(messages[i]!.id))
        const error = rejection(result)
        assert.strictEqual(error.isRetryable, WebhookPublisher.isRetryableStatus(status), `status ${status}`)
        assert.strictEqual(error.isRetryable, [408, 429, 500, 502, 503, 504].includes(status), `status ${status}`)
        assert.include(error.message, `orders-hook answered HTTP ${status}`)
        assert.isTrue(Option.isNone(error.retryAfter))
      })
      const notFound = rejection(results[statuses.indexOf(404)]!)
      assert.include(notFound.message, "no such order")
      assert.isTrue(notFound.message.endsWith("…"), "marked as cut")
      assert.isBelow(notFound.message.length, 160, "at most errorBodyBytes of the body")
      assert.include(rejection(results[statuses.indexOf(422)]!).message, `{"error":"status 422"}`)
      // The redirect was not followed: one request per event, nothing sent to the location.
      assert.strictEqual(r.received.length, statuses.length)
    }))

  it.live("Retry-After in seconds or as an HTTP date becomes the error's retryAfter, capped by maxRetryAfter", () =>
    Effect.gen(function*() {
      const answers: Record<string, Answer> = {
        seconds: { status: 429, headers: { "retry-after": "7" } },
        date: { status: 503, headers: { "retry-after": new Date(Date.now() + 30_000).toUTCString() } },
        huge: { status: 429, headers: { "retry-after": "999999" } },
        garbage: { status: 503, headers: { "retry-after": "soon" } }
      }
      const r = yield* receiver((req) => answers[req.json.aggregateId]!)
      const pub = yield* publisher({ endpoints: [{ url: r.url, secret }], maxRetryAfter: "1 hour" })
      const results = yield* pub.publish(["seconds", "date", "huge", "garbage"].map((k) => message("order.placed", k)))
      const [seconds, date, huge, garbage] = results.map(rejection)
      assert.strictEqual(Duration.toMillis(Option.getOrThrow(seconds!.retryAfter)), 7_000)
      // An HTTP date has whole seconds, and a slow machine takes a while between answering and parsing.
      assert.isAtLeast(Duration.toMillis(Option.getOrThrow(date!.retryAfter)), 15_000)
      assert.isAtMost(Duration.toMillis(Option.getOrThrow(date!.retryAfter)), 30_000)
      assert.strictEqual(Duration.toMillis(Option.getOrThrow(huge!.retryAfter)), 3_600_000)
      assert.isTrue(Option.isNone(garbage!.retryAfter))
      assert.isTrue(seconds!.isRetryable && date!.isRetryable && huge!.isRetryable && garbage!.isRetryable)
    }))

  it.live("a receiver that does not answer in time: retryable, and the request is abandoned", () =>
    Effect.gen(function*() {
      const r = yield* receiver(() => ({ hang: true }))
      const pub = yield* publisher({ endpoints: [{ url: r.url, secret, timeout: "300 millis" }] })
      const [result] = yield* pub.publish([message("order.placed")])
      const error = rejection(result!)
      assert.isTrue(error.isRetryable)
      assert.include(error.message, "did not answer within")
      yield* waitFor("the abandoned request to be closed", () => r.inFlight() === 0)
    }))

  it.live("interrupting a publish (the relay's publish timeout, shutdown) aborts its requests", () =>
    Effect.gen(function*() {
      const r = yield* receiver(() => ({ hang: true }))
      const pub = yield* publisher({ endpoints: [{ url: r.url, secret, timeout: "1 hour", concurrency: 2 }] })
      const fiber = yield* Effect.forkChild(
        pub.publish([message("order.placed"), message("order.placed"), message("order.placed")])
      )
      yield* waitFor("two requests in flight (the endpoint's concurrency)", () => r.inFlight() === 2)
      yield* Fiber.interrupt(fiber)
      yield* waitFor("the requests to be closed", () => r.inFlight() === 0)
      // The third, queued behind the limit, was never sent.
      assert.strictEqual(r.received.length, 2)
    }))

  it.live("a receiver that is down (connection refused): retryable, as unavailability", () =>
    Effect.gen(function*() {
      const r = yield* Effect.promise(() => startReceiver(secret))
      yield* Effect.promise(() => r.close())
      const pub = yield* publisher({ endpoints: [{ url: r.url, secret }] })
      const [result] = yield* pub.publish([message("order.placed")])
      const error = rejection(result!)
      assert.isTrue(error.isRetryable)
      assert.include(error.message, "unreachable")
    }))

  it.live("per-endpoint concurrency: each endpoint has its own limit on requests in flight", () =>
    Effect.gen(function*() {
      // The wide receiver holds each request until three are in flight (or the last ones came):
      // the limit is reached whatever the machine's speed, and never passed.
      let wideReceiver: Receiver | undefined
      const full = () => wideReceiver!.inFlight() >= 3 || wideReceiver!.received.length === 12
      const wide = yield* receiver(async () => {
        await until("three requests in flight", full)
        return { status: 204 }
      })
      wideReceiver = wide
      const narrow = yield* receiver(() => ({ status: 204, delayMs: 30 }))
      const pub = yield* publisher({
        endpoints: [
          { url: wide.url, secret, types: ["order.*"], concurrency: 3 },
          { url: narrow.url, secret, types: ["order.*"], concurrency: 1 }
        ]
      })
      const messages = Array.from({ length: 12 }, () => message("order.placed"))
      const results = yield* pub.publish(messages)
      assert.isTrue(results.every((x) => x._tag === "Published"))
      assert.strictEqual(wide.received.length, 12)
      assert.strictEqual(narrow.received.length, 12)
      assert.strictEqual(wide.maxInFlight(), 3)
      assert.strictEqual(narrow.maxInFlight(), 1)
    }))

  it.live("routing by type pattern; an event for several endpoints is published once all accepted it; unmatched fails or is skipped", () =>
    Effect.gen(function*() {
      const orders = yield* receiver((req) => ({ status: req.json.aggregateId === "refused" ? 410 : 204 }))
      const everything = yield* receiver()
      const pub = yield* publisher({
        endpoints: [
          { url: orders.url, secret, types: ["order.*"], name: "orders" },
          { url: everything.url, secret, types: ["order.#", "payment.captured"], name: "all" }
        ]
      })
      const placed = message("order.placed")
      const deep = message("order.line.added")
      const captured = message("payment.captured")
      const refused = message("order.cancelled", "refused")
      const stray = message("inventory.reserved")
      const results = yield* pub.publish([placed, deep, captured, refused, stray])
      assert.deepStrictEqual(results.slice(0, 3), [
        Publisher.published(placed.id),
        Publisher.published(deep.id),
        Publisher.published(captured.id)
      ])
      assert.sameMembers(orders.received.map((x) => x.id), [placed.id, refused.id])
      assert.sameMembers(everything.received.map((x) => x.id), [placed.id, deep.id, captured.id, refused.id])
      const refusal = rejection(results[3]!)
      assert.isFalse(refusal.isRetryable)
      assert.include(refusal.message, "orders answered HTTP 410")
      const unmatched = rejection(results[4]!)
      assert.isFalse(unmatched.isRetryable)
      assert.include(unmatched.message, "no webhook endpoint subscribes to inventory.reserved")
      const skipping = yield* publisher({
        endpoints: [{ url: orders.url, secret, types: ["order.*"] }],
        unmatched: "skip"
      })
      assert.deepStrictEqual(yield* skipping.publish([stray]), [Publisher.published(stray.id)])
    }))

  it.effect("configuration errors are InvalidConfig with the path, and never show the secret", () =>
    Effect.gen(function*() {
      const url = "http://127.0.0.1:9/hooks"
      const cases: ReadonlyArray<[WebhookPublisher.Config, string]> = [
        [{ endpoints: [] }, "endpoints"],
        [{ endpoints: [{ url: "ftp://x/y", secret }] }, "endpoints[0].url"],
        [{ endpoints: [{ url: "not a url", secret }] }, "endpoints[0].url"],
        [{ endpoints: [{ url, secret: "whsec_dG9vIHNob3J0" }] }, "endpoints[0].secret"],
        [{ endpoints: [{ url, secret: [] }] }, "endpoints[0].secret"],
        [{ endpoints: [{ url, secret, concurrency: 0 }] }, "endpoints[0].concurrency"],
        [{ endpoints: [{ url, secret, timeout: "0 millis" }] }, "endpoints[0].timeout"],
        [{ endpoints: [{ url, secret, types: [] }] }, "endpoints[0].types"],
        [{ endpoints: [{ url, secret }], unmatched: "drop" as "skip" }, "unmatched"]
      ]
      for (const [config, path] of cases) {
        const error = yield* Effect.flip(WebhookPublisher.make(config))
        assert.strictEqual(error._tag, "InvalidConfig")
        assert.strictEqual(error.path, path)
        assert.notInclude(error.message, "dG9vIHNob3J0")
      }
    }))
})

const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String })
})

/** A Postgres outbox on a fresh schema, the webhook publisher, and a relay retrying after 20 ms. */
const withRelay = <A, E>(
  endpoint: WebhookPublisher.Endpoint,
  body: (schema: string) => Effect.Effect<A, E, OutboxStore | SqlClient.SqlClient | Scope.Scope>
) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(pgClientLayer())
    return yield* Effect.gen(function*() {
      const schema = yield* freshSchema("webhooks")
      const store = yield* PgOutboxStore.make({ schema })
      const services = Layer.mergeAll(
        Layer.succeed(OutboxStore)(store),
        WebhookPublisher.layer({ endpoints: [endpoint] })
      )
      yield* Layer.build(
        Relay.layer({
          statsInterval: false,
          retention: false,
          retry: Schedule.spaced("20 millis"),
          maxAttempts: 100,
          pollInterval: { base: "20 millis", max: "100 millis" }
        }).pipe(Layer.provide(services))
      )
      return yield* body(schema).pipe(Effect.provideService(OutboxStore, store))
    }).pipe(Effect.provideContext(context))
  }))

/** Polls `check` every 20 ms until it holds. */
const eventually = <E, R>(what: string, check: Effect.Effect<boolean, E, R>) =>
  check.pipe(
    Effect.flatMap((ok) => ok ? Effect.void : Effect.fail("not yet" as const)),
    Effect.retry(Schedule.spaced("20 millis")),
    Effect.timeoutOrElse({
      duration: "60 seconds",
      orElse: () => Effect.die(new Error(`timed out waiting for ${what}`))
    })
  )

const rows = (schema: string) =>
  SqlClient.SqlClient.use((sql) =>
    sql<
      { id: string; status: string; attempts: number; last_error: string | null }
    >`SELECT id::text AS id, status, attempts, last_error FROM ${sql(`${schema}.outbox`)}`
  )

describe("WebhookPublisher as the relay's publisher (PostgreSQL)", () => {
  it.live("honours Retry-After over a shorter retry schedule, and fails a 404 with the response recorded", () =>
    Effect.gen(function*() {
      const seen = new Set<string>()
      const r = yield* receiver((req): Answer => {
        if (req.json.data.orderId === "gone") return { status: 404, body: "order gone" }
        if (seen.has(req.id)) return { status: 204 }
        seen.add(req.id)
        return { status: 429, headers: { "retry-after": "1" } }
      })
      yield* withRelay({ url: r.url, secret }, (schema) =>
        Effect.gen(function*() {
          const ok = yield* Outbox.transaction(
            Outbox.append(OrderPlaced, { aggregateId: "o-1", payload: { orderId: "ok" } })
          )
          const gone = yield* Outbox.transaction(
            Outbox.append(OrderPlaced, { aggregateId: "o-2", payload: { orderId: "gone" } })
          )
          const store = yield* OutboxStore
          yield* eventually("both events settled", Effect.map(store.stats, (s) => s.published === 1 && s.failed === 1))
          const attempts = r.received.filter((x) => x.id === ok.id)
          assert.strictEqual(attempts.length, 2)
          // The schedule said 20 ms; the receiver said 1 s.
          assert.isAtLeast(attempts[1]!.at - attempts[0]!.at, 950)
          const byId = new Map((yield* rows(schema)).map((row) => [row.id, row]))
          assert.strictEqual(byId.get(ok.id)!.attempts, 2)
          assert.strictEqual(byId.get(gone.id)!.status, "failed")
          assert.strictEqual(byId.get(gone.id)!.attempts, 1)
          assert.include(byId.get(gone.id)!.last_error!, "answered HTTP 404")
          assert.include(byId.get(gone.id)!.last_error!, "order gone")
          assert.include(byId.get(gone.id)!.last_error!, "(not retryable)")
        }))
    }))

  it.live("a receiver that is down and comes back: the events are delivered once it is back, the attempts while down counted as retries", () =>
    Effect.gen(function*() {
      const first = yield* Effect.promise(() => startReceiver(secret))
      const port = first.port
      yield* Effect.promise(() => first.close())
      yield* withRelay({ url: first.url, secret, timeout: "2 seconds" }, (schema) =>
        Effect.gen(function*() {
          const ids = yield* Effect.forEach(Array.from({ length: 5 }, (_, i) => i), (i) =>
            Outbox.transaction(Outbox.append(OrderPlaced, { aggregateId: `o-${i}`, payload: { orderId: `o-${i}` } }))
              .pipe(Effect.map((m) =>
                m.id
              )))
          yield* eventually(
            "every event tried at least twice while the receiver is down",
            Effect.map(rows(schema), (rs) =>
              rs.length === 5 && rs.every((row) =>
                row.attempts >= 2 && row.status !== "failed"
              ))
          )
          const down = yield* rows(schema)
          assert.isTrue(
            down.every((row) => row.status !== "published" && (row.last_error ?? "").includes("unreachable")),
            JSON.stringify(down)
          )
          const back = yield* receiver(undefined, port)
          const store = yield* OutboxStore
          yield* eventually(
            "every event published once the receiver is back",
            Effect.map(store.stats, (s) => s.published === 5)
          )
          assert.sameMembers([...new Set(back.received.map((x) => x.id))], ids)
          assert.isTrue(back.received.every((x) => x.verified))
          const after = yield* rows(schema)
          assert.isTrue(after.every((row) => row.status === "published" && row.attempts >= 3))
        }))
    }))
})
