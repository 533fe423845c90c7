/**
 * The console's routes: the prebuilt page (up to date with its sources, served with a strict CSP
 * and its assets under its mount point) and its JSON API on the memory stores and on Postgres: closed
 * without a token, the overview, failed events retried by type and published, discarded, inbox
 * dead letters replayed, sagas listed with filters, a timeline, and actions refused in the wrong
 * state. The page itself is driven in Chromium by test/console.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { PublishError, Refused } from "@tidings/core/Errors"
import * as Event from "@tidings/core/Event"
import * as Health from "@tidings/core/Health"
import { InboxStore } from "@tidings/core/InboxStore"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as Outbox from "@tidings/core/Outbox"
import * as Saga from "@tidings/core/Saga"
import { Effect, Redacted, Schema } from "effect"
import { Hono } from "hono"
import * as fs from "node:fs"
import { render, target } from "../scripts/build-console.ts"
import * as Console from "../src/Console.ts"
import * as Assets from "../src/internal/consoleAssets.ts"
import * as Runtime from "../src/Runtime.ts"
import * as Safety from "../src/Safety.ts"
import { json, memoryLayer, pgLayer, waitUntil } from "./support.ts"

const tokenText = "console-admin-token-0123456789abcdef"
const auth = { authorization: `Bearer ${tokenText}` }

const Shipped = Event.define("parcel.shipped", { aggregateType: "parcel", schema: Schema.Struct({ n: Schema.Int }) })
const Billed = Event.define("invoice.billed", { aggregateType: "invoice", schema: Schema.Struct({ n: Schema.Int }) })
const Checkout = Saga.make("console-checkout", { input: Schema.Struct({ orderId: Schema.String }) })
  .step("reserve", {
    action: () => Effect.succeed({ reservation: "r1" }),
    result: Schema.Struct({ reservation: Schema.String }),
    compensate: () => Effect.void
  })
  .step("charge", { action: () => Effect.void })

describe("Console assets", () => {
  it("the generated module is up to date with packages/hono/console (node packages/hono/scripts/build-console.ts)", () => {
    expect(fs.readFileSync(target, "utf8")).toBe(render())
  })
})

const consoleSuite = (name: string, makeRuntime: () => Promise<Runtime.Runtime<any>>) =>
  describe(`Console (${name})`, () => {
    let rt: Runtime.Runtime<any>
    let app: Hono
    const get = async (path: string) => {
      const res = await app.request(`/admin/console/api/${path}`, { headers: auth })
      return { status: res.status, body: (await res.json()) as any }
    }
    const post = async (path: string, body?: unknown) => {
      const res = await app.request(
        `/admin/console/api/${path}`,
        body === undefined ? { method: "POST", headers: auth } : json(body, { headers: auth })
      )
      return { status: res.status, body: (await res.json()) as any }
    }
    const delivered = async (aggregateId: string) =>
      (await rt.runPromise(MemoryBroker.MemoryBroker.use((b) => b.delivered))).filter((d) =>
        d.message.aggregateId === aggregateId
      ).length

    beforeAll(async () => {
      rt = await makeRuntime()
      await rt.runPromise(
        MemoryBroker.MemoryBroker.use((b) =>
          b.setFault((m) =>
            m.aggregateId.startsWith("poison-") && !m.headers["x-healed"] && !healed.has(m.aggregateId)
              ? new PublishError({ message: "exchange refused it", reason: new Refused({ retryable: false }) })
              : undefined
          )
        )
      )
      app = Safety.app()
      app.route(
        "/admin/console",
        Console.routes(rt, {
          auth: Redacted.make(tokenText),
          checks: [Health.relay, Health.up("broker")],
          throughputMinutes: 10
        })
      )
      app.route("/closed", Console.routes(rt))
    })
    afterAll(async () => {
      await rt?.dispose()
    })
    const healed = new Set<string>()

    /** Appends events the broker refuses and waits until the relay failed them. */
    const failed = async (type: typeof Shipped | typeof Billed, n: number) => {
      const aggregateIds = Array.from({ length: n }, () => `poison-${crypto.randomUUID()}`)
      await rt.runPromise(
        Outbox.transaction(
          Outbox.appendAll(aggregateIds.map((aggregateId, i) => type.make({ aggregateId, payload: { n: i } })))
        )
      )
      await waitUntil(
        async () => {
          const { body } = await get(`outbox/events?status=failed&type=${type.type}&limit=500`)
          return aggregateIds.every((id) => body.events.some((e: any) => e.aggregateId === id))
        },
        15_000,
        "the events to fail"
      )
      return aggregateIds
    }

    it("serves the prebuilt page with a strict CSP, its assets under the mount point", async () => {
      for (const path of ["/admin/console", "/admin/console/index.html"]) {
        const page = await app.request(path)
        expect(page.status, path).toBe(200)
        expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8")
        expect(page.headers.get("content-security-policy")).toContain("script-src 'self'")
        expect(page.headers.get("content-security-policy")).toContain("frame-ancestors 'none'")
        const html = await page.text()
        expect(html).toContain("<script type=\"module\" src=\"/admin/console/console.js\">")
        expect(html).toContain("<link rel=\"stylesheet\" href=\"/admin/console/console.css\">")
      }
      const js = await app.request("/admin/console/console.js")
      expect(js.headers.get("content-type")).toBe("text/javascript; charset=utf-8")
      expect(await js.text()).toBe(Assets.js)
      expect(await (await app.request("/admin/console/console.css")).text()).toBe(Assets.css)
    })

    it("the API needs the admin token (401), and is closed without a configured guard (403)", async () => {
      expect((await app.request("/admin/console/api/overview")).status).toBe(401)
      expect(
        (await app.request("/admin/console/api/overview", {
          headers: { authorization: "Bearer wrong-token-0123456789abcdef-0123" }
        })).status
      ).toBe(401)
      expect((await app.request("/closed/api/overview", { headers: auth })).status).toBe(403)
      // The page is no secret: it holds no data.
      expect((await app.request("/closed")).status).toBe(200)
    })

    it("overview: outbox counts, throughput per minute, relay, components, sagas and inbox counts", async () => {
      const aggregateId = `ok-${crypto.randomUUID()}`
      await rt.runPromise(Outbox.transaction(Outbox.append(Shipped, { aggregateId, payload: { n: 1 } })))
      await waitUntil(async () => (await delivered(aggregateId)) === 1, 10_000, "the event to be published")
      let overview: any
      await waitUntil(
        async () => {
          overview = (await get("overview")).body
          return overview.outbox.throughput.reduce((n: number, m: any) => n + m.published, 0) >= 1
        },
        10_000,
        "the throughput to count it"
      )
      expect(overview.outbox).toMatchObject({
        pending: expect.any(Number),
        failed: expect.any(Number),
        oldestPendingAgeMs: null
      })
      expect(overview.outbox.throughput).toHaveLength(10)
      expect(overview.relays.local).toMatchObject({ running: true, ordering: "unordered" })
      expect(overview.relays.local.published).toBeGreaterThanOrEqual(1)
      expect(overview.components.map((c: any) => [c.name, c.status])).toEqual([["relay", "up"], ["broker", "up"]])
      expect(overview.sagas).toMatchObject({ running: expect.any(Number), failed: expect.any(Number) })
      expect(overview.inbox).toEqual({
        processing: expect.any(Number),
        processed: expect.any(Number),
        failed: expect.any(Number)
      })
      expect(overview.deadLetterQueues).toBeNull()
      expect(Array.isArray(overview.consumers)).toBe(true)
      expect(overview.refreshIntervalMs).toBe(2000)
    })

    it("failed events with payload, headers and the last error; bulk retry by type publishes them; discard deletes", async () => {
      const shipped = await failed(Shipped, 3)
      const billed = await failed(Billed, 1)
      const { body } = await get(`outbox/events?status=failed&type=${Shipped.type}`)
      const event = body.events.find((e: any) => e.aggregateId === shipped[0])
      expect(event).toMatchObject({
        type: Shipped.type,
        status: "failed",
        attempts: 1,
        lastError: "exchange refused it (not retryable)",
        payload: { n: 0 }
      })
      expect(event.headers).toHaveProperty("traceparent")
      expect((await get(`outbox/events/${event.id}`)).body.id).toBe(event.id)
      expect((await get(`outbox/events/${crypto.randomUUID()}`)).status).toBe(404)
      const byType = (await get("overview")).body.outbox.failedByType
      expect(byType.find((t: any) => t.type === Shipped.type).count).toBeGreaterThanOrEqual(3)

      for (const id of shipped) healed.add(id)
      const retried = await post("outbox/failed/retry", { type: Shipped.type })
      expect(retried.status).toBe(200)
      expect(retried.body.retried).toBeGreaterThanOrEqual(3)
      await waitUntil(
        async () => (await Promise.all(shipped.map(delivered))).every((n) => n === 1),
        10_000,
        "the retried events to be published"
      )
      // Delivered is not yet settled: the relay marks the event published after the broker's confirm.
      await waitUntil(
        async () => (await get(`outbox/events/${event.id}`)).body.status === "published",
        10_000,
        "the relay to settle the retried event"
      )
      // The other type is still failed; discard it for good.
      const other = (await get(`outbox/events?status=failed&type=${Billed.type}`)).body.events.find((e: any) =>
        e.aggregateId === billed[0]
      )
      expect((await post("outbox/failed/discard", { ids: [other.id] })).body).toEqual({ discarded: 1 })
      expect((await get(`outbox/events/${other.id}`)).status).toBe(404)
      expect((await post("outbox/failed/retry", { type: "" })).status).toBe(400)
      expect((await post("outbox/failed/retry", { ids: ["nope"] })).status).toBe(400)
    })

    it("inbox dead letters: listed, replayed (reset, and requeued from the outbox); 404 when not dead-lettered", async () => {
      const aggregateId = `inbox-${crypto.randomUUID()}`
      const [message] = await rt.runPromise(
        Outbox.transaction(Outbox.appendAll([Shipped.make({ aggregateId, payload: { n: 7 } })]))
      )
      await waitUntil(async () => (await delivered(aggregateId)) === 1, 10_000, "the event to be published")
      await rt.runPromise(
        InboxStore.use((s) =>
          s.markFailed(message!.id, "billing", "crash loop: 3 handling attempts started and none finished")
        )
      )
      const list = (await get("inbox?status=failed&consumer=billing")).body.records
      expect(list.find((r: any) => r.messageId === message!.id)).toMatchObject({
        consumer: "billing",
        status: "failed",
        lastError: expect.stringContaining("crash loop")
      })
      expect((await post("inbox/replay", { messageId: message!.id, consumer: "billing" })).body).toEqual({
        reset: true,
        requeued: true
      })
      await waitUntil(async () => (await delivered(aggregateId)) === 2, 10_000, "the event to be published again")
      expect((await post("inbox/replay", { messageId: message!.id, consumer: "billing" })).status).toBe(404)
    })

    it("sagas: filtered list, one saga with its timeline; actions refused in the wrong state", async () => {
      const done = await rt.runPromise(Saga.run(Checkout, { orderId: "o-1" }))
      const list = (await get(`sagas?type=${Checkout.name}&status=completed`)).body.sagas
      expect(list.map((s: any) => s.id)).toContain(done.id)
      expect((await get(`sagas?type=${Checkout.name}&status=failed`)).body.sagas).toEqual([])
      const detail = (await get(`sagas/${done.id}`)).body
      expect(detail.saga).toMatchObject({ id: done.id, status: "completed", type: Checkout.name })
      expect(detail.timeline.map((e: any) => [e.step, e.status, e.current])).toEqual([["reserve", "completed", null], [
        "charge",
        "completed",
        null
      ]])
      expect(detail.timeline[0].durationMs).toBeGreaterThanOrEqual(0)
      const compensate = await post(`sagas/${done.id}/compensate`)
      expect(compensate.status).toBe(409)
      expect(compensate.body.error.tag).toBe("SagaActionConflict")
      expect((await post(`sagas/${done.id}/retry`)).status).toBe(409)
      expect((await post(`sagas/${crypto.randomUUID()}/retry`)).status).toBe(404)
      expect((await get("sagas?status=bogus")).status).toBe(400)
    })

    it("dead-letter queues need the port: 501 without it", async () => {
      const res = await get("dlq")
      expect(res.status).toBe(501)
      expect(res.body.error.tag).toBe("NotImplemented")
    })
  })

consoleSuite("memory stores", () => Runtime.make(memoryLayer()))
consoleSuite("postgres", () => Runtime.make(pgLayer()))

describe("Console options", () => {
  it("bad settings throw at construction", async () => {
    const rt = await Runtime.make(memoryLayer({ relay: false }))
    try {
      expect(() => Console.routes(rt, { refreshIntervalMs: 10 })).toThrow(/refreshIntervalMs/)
      expect(() => Console.routes(rt, { throughputMinutes: 0 })).toThrow(/throughputMinutes/)
      expect(() => Console.routes(rt, { auth: Redacted.make("short") })).toThrow(/32 characters/)
    } finally {
      await rt.dispose()
    }
  })
})
