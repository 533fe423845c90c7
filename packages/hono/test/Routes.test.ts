import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { PublishError, Refused } from "@tidings/core/Errors"
import * as Event from "@tidings/core/Event"
import * as Health from "@tidings/core/Health"
import { InboxStore } from "@tidings/core/InboxStore"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import type * as OutboxStoreNs from "@tidings/core/OutboxStore"
import * as Saga from "@tidings/core/Saga"
import * as PgClient from "@tidings/postgres/PgClient"
import { Duration, Effect, Redacted, Schema } from "effect"
import { Hono } from "hono"
import * as Routes from "../src/Routes.ts"
import * as Runtime from "../src/Runtime.ts"
import { json, memoryLayer, pgLayer, waitUntil } from "./support.ts"

const token = Redacted.make("admin-token-0123456789abcdef-0123456789")
const auth = { authorization: "Bearer admin-token-0123456789abcdef-0123456789" }

const Shipped = Event.define("parcel.shipped", { aggregateType: "parcel", schema: Schema.Struct({ n: Schema.Int }) })

const Checkout = Saga.make("checkout", { input: Schema.Struct({ orderId: Schema.String }) })
  .step("reserve", {
    action: () => Effect.succeed({ reservation: "r1" }),
    result: Schema.Struct({ reservation: Schema.String })
  })
  .step("charge", { action: () => Effect.void })

type FailedJson = {
  id: string
  type: string
  aggregateId: string
  lastError: string | null
  attempts: number
  payload: unknown
}
type InboxJson = { messageId: string; consumer: string; status: string; lastError: string | null }

const routesSuite = (
  name: string,
  makeRuntime: () => Promise<Runtime.Runtime<any>>,
  extraChecks: ReadonlyArray<Health.Check<any>>
) =>
  describe(`Routes (${name})`, () => {
    let rt: Runtime.Runtime<any>
    let app: Hono
    const get = (path: string) => app.request(path, { headers: auth })
    const post = (path: string, body?: unknown) =>
      app.request(path, body === undefined ? { method: "POST", headers: auth } : json(body, { headers: auth }))
    const failedEvents = async () =>
      ((await (await get("/admin/outbox/failed")).json()) as { events: Array<FailedJson> }).events
    const delivered = async (aggregateId: string) =>
      (await rt.runPromise(MemoryBroker.MemoryBroker.use((b) => b.delivered))).some((d) =>
        d.message.aggregateId === aggregateId
      )

    /** Appends an event that the broker refuses for good, and waits until the relay failed it. */
    const failedEvent = async (): Promise<FailedJson> => {
      const aggregateId = `poison-${crypto.randomUUID()}`
      const message = await rt.runPromise(
        Outbox.transaction(Outbox.append(Shipped, { aggregateId, payload: { n: 1 } }))
      )
      let found: FailedJson | undefined
      await waitUntil(
        async () => (found = (await failedEvents()).find((e) => e.id === message.id)) !== undefined,
        10_000,
        "the event to fail"
      )
      return found!
    }

    beforeAll(async () => {
      rt = await makeRuntime()
      await rt.runPromise(MemoryBroker.MemoryBroker.use((b) =>
        b.setFault((m) =>
          m.aggregateId.startsWith("poison-") && !m.headers["x-healed"]
            ? new PublishError({ message: "exchange refused it", reason: new Refused({ retryable: false }) })
            : undefined
        )
      ))
      app = new Hono()
      app.route("/admin", Routes.all(rt, { auth: token, checks: [Health.relay, ...extraChecks] }))
    })
    afterAll(async () => {
      await rt?.dispose()
    })

    it("GET /sagas/:id: the execution with its steps; 404 unknown; 400 not a UUID", async () => {
      const done = await rt.runPromise(Saga.run(Checkout, { orderId: "o-1" }))
      const res = await get(`/admin/sagas/${done.id}`)
      expect(res.status).toBe(200)
      const body = (await res.json()) as {
        saga: { id: string; status: string; type: string; input: unknown }
        steps: Array<{ name: string; status: string; result: unknown }>
      }
      expect(body.saga).toMatchObject({ id: done.id, status: "completed", type: "checkout", input: { orderId: "o-1" } })
      expect(body.steps.map((s) => [s.name, s.status])).toEqual([["reserve", "completed"], ["charge", "completed"]])
      expect(body.steps[0]!.result).toEqual({ reservation: "r1" })

      const unknown = await get(`/admin/sagas/${crypto.randomUUID()}`)
      expect(unknown.status).toBe(404)
      expect(((await unknown.json()) as { error: { tag: string } }).error.tag).toBe("NotFound")
      const bad = await get("/admin/sagas/not-a-uuid")
      expect(bad.status).toBe(400)
      expect(((await bad.json()) as { error: { issues: Array<{ path: Array<string> }> } }).error.issues[0]!.path)
        .toEqual(["params", "id"])
    })

    it("outbox: stats and failed events with their errors; retrying one makes it pending and the relay publishes it", async () => {
      const event = await failedEvent()
      expect(event).toMatchObject({ type: "parcel.shipped", payload: { n: 1 }, attempts: 1 })
      expect(event.lastError).toContain("exchange refused it")
      const stats = (await (await get("/admin/outbox/stats")).json()) as {
        failed: number
        pending: number
        published: number
      }
      expect(stats.failed).toBeGreaterThanOrEqual(1)

      // Heal the broker for this event only, then retry it through the route.
      await rt.runPromise(MemoryBroker.MemoryBroker.use((b) =>
        b.setFault((m) =>
          m.aggregateId.startsWith("poison-") && m.id !== event.id
            ? new PublishError({ message: "exchange refused it", reason: new Refused({ retryable: false }) })
            : undefined
        )
      ))
      const retried = await post(`/admin/outbox/failed/${event.id}/retry`)
      expect([retried.status, await retried.json()]).toEqual([200, { retried: 1 }])
      await waitUntil(
        () =>
          delivered(event.aggregateId),
        10_000,
        "the retried event to be published"
      )
      expect((await failedEvents()).some((e) =>
        e.id === event.id
      )).toBe(false)
      // Not failed any more: a second retry finds nothing.
      expect((await post(`/admin/outbox/failed/${event.id}/retry`)).status).toBe(404)
    })

    it("outbox: retry all failed events with { all: true }", async () => {
      const a = await failedEvent()
      const b = await failedEvent()
      await rt.runPromise(MemoryBroker.MemoryBroker.use((broker) => broker.setFault(undefined)))
      try {
        const res = await post("/admin/outbox/failed/retry", { all: true })
        expect(res.status).toBe(200)
        expect(((await res.json()) as { retried: number }).retried).toBeGreaterThanOrEqual(2)
        await waitUntil(
          async () => (await delivered(a.aggregateId)) && (await delivered(b.aggregateId)),
          10_000,
          "both events published"
        )
        expect(await failedEvents()).toEqual([])
      } finally {
        await rt.runPromise(MemoryBroker.MemoryBroker.use((broker) =>
          broker.setFault((m) =>
            m.aggregateId.startsWith("poison-")
              ? new PublishError({ message: "exchange refused it", reason: new Refused({ retryable: false }) })
              : undefined
          )
        ))
      }
    })

    it("outbox: discard deletes a failed event for good; unknown ids 404; bad bodies 400", async () => {
      const one = await failedEvent()
      const two = await failedEvent()
      const del = await app.request(`/admin/outbox/failed/${one.id}`, { method: "DELETE", headers: auth })
      expect([del.status, await del.json()]).toEqual([200, { discarded: 1 }])
      expect((await app.request(`/admin/outbox/failed/${one.id}`, { method: "DELETE", headers: auth })).status).toBe(
        404
      )
      const bulk = await post("/admin/outbox/failed/discard", { ids: [two.id, crypto.randomUUID()] })
      expect([bulk.status, await bulk.json()]).toEqual([200, { discarded: 1 }])
      const ids = (await failedEvents()).map((e) =>
        e.id
      )
      expect(ids).not.toContain(one.id)
      expect(ids).not.toContain(two.id)
      expect(await delivered(one.aggregateId)).toBe(false)

      for (
        const [path, body] of [
          ["/admin/outbox/failed/discard", { ids: [] }],
          ["/admin/outbox/failed/discard", { ids: ["nope"] }],
          ["/admin/outbox/failed/retry", {}],
          ["/admin/outbox/failed/retry", { all: false }]
        ] as const
      ) {
        const res = await post(path, body)
        expect(res.status, JSON.stringify(body)).toBe(400)
        expect(((await res.json()) as { error: { issues: Array<unknown> } }).error.issues.length).toBeGreaterThan(0)
      }
      const malformed = await app.request("/admin/outbox/failed/retry", {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: "{"
      })
      expect(malformed.status).toBe(400)
      // JSON bodies need their content type: a form post is refused before it is read.
      const form = await app.request("/admin/outbox/failed/retry", {
        method: "POST",
        headers: { ...auth, "content-type": "application/x-www-form-urlencoded" },
        body: "all=true"
      })
      expect(form.status).toBe(415)
      expect((await app.request("/admin/outbox/failed/xyz", { method: "DELETE", headers: auth })).status).toBe(400)
      expect((await get("/admin/outbox/failed?limit=0")).status).toBe(400)
      expect((await get("/admin/outbox/failed?limit=abc")).status).toBe(400)
      expect((await get("/admin/outbox/failed?limit=1001")).status).toBe(400)
    })

    it("inbox: list by status and consumer, counts, one row; the dead letters show failed rows with their reason", async () => {
      const tag = crypto.randomUUID().slice(0, 8)
      const [c1, c2] = [`billing-${tag}`, `shipping-${tag}`]
      await rt.runPromise(InboxStore.use((s) =>
        Effect.gen(function*() {
          yield* s.begin("m1", c1, "i")
          yield* s.markFailed("m1", c1, "poison message: bad payload")
          yield* s.begin("m2", c1, "i")
          yield* s.withTransaction(s.markProcessed("m2", c1))
          yield* s.begin("m3", c2, "i")
        })
      ))
      const failed =
        ((await (await get(`/admin/inbox?status=failed&consumer=${c1}`)).json()) as { records: Array<InboxJson> })
          .records
      expect(failed.map((r) => [r.messageId, r.status, r.lastError])).toEqual([[
        "m1",
        "failed",
        "poison message: bad payload"
      ]])
      const ofC1 = ((await (await get(`/admin/inbox?consumer=${c1}`)).json()) as { records: Array<InboxJson> }).records
      expect(ofC1.map((r) => r.messageId).sort()).toEqual(["m1", "m2"])
      const limited =
        ((await (await get(`/admin/inbox?consumer=${c1}&limit=1`)).json()) as { records: Array<InboxJson> }).records
      expect(limited).toHaveLength(1)
      expect(await (await get(`/admin/inbox/counts?consumer=${c1}`)).json()).toEqual({
        processing: 0,
        processed: 1,
        failed: 1
      })
      expect(await (await get(`/admin/inbox/counts?consumer=${c2}`)).json()).toEqual({
        processing: 1,
        processed: 0,
        failed: 0
      })
      const all = (await (await get("/admin/inbox/counts")).json()) as {
        processing: number
        processed: number
        failed: number
      }
      expect(all.failed).toBeGreaterThanOrEqual(1)
      const one = await get(`/admin/inbox/${c1}/m2`)
      expect(((await one.json()) as InboxJson).status).toBe("processed")
      expect((await get(`/admin/inbox/${c1}/nope`)).status).toBe(404)
      expect((await get("/admin/inbox?status=lost")).status).toBe(400)

      const outboxFailed = await failedEvent()
      const dead = (await (await get(`/admin/dead-letters?consumer=${c1}`)).json()) as {
        inbox: Array<InboxJson>
        outbox: Array<FailedJson>
      }
      expect(dead.inbox.map((r) => [r.messageId, r.lastError])).toEqual([["m1", "poison message: bad payload"]])
      expect(dead.outbox.find((e) => e.id === outboxFailed.id)?.lastError).toContain("exchange refused it")
    })

    it("/health is up; /ready runs the checks: 200 when all pass, 503 with the report when one fails", async () => {
      const health = await app.request("/admin/health")
      expect([health.status, await health.json()]).toEqual([200, { status: "up" }])
      const ready = await app.request("/admin/ready")
      const report = (await ready.json()) as Health.Report
      expect(ready.status).toBe(200)
      expect(report.status).toBe("up")
      expect(report.checks.map((c) => [c.name, c.status])).toEqual([
        ["relay", "up"],
        ...extraChecks.map((c) => [c.name, "up"])
      ])

      const probes = new Hono()
      probes.route(
        "/",
        Routes.health(rt, {
          auth: token,
          timeout: "200 millis",
          checks: [
            Health.relay,
            Health.up("memory"),
            Health.make(
              "db",
              Effect.fail(new PublishError({ message: "db unreachable", reason: new Refused({ retryable: true }) }))
            ),
            Health.make("broker", Effect.succeed(false), "broker not connected"),
            Health.make("slow", Effect.never)
          ]
        })
      )
      // Anonymous: names and states only.
      const anonymous = await probes.request("/ready")
      expect(anonymous.status).toBe(503)
      expect(await anonymous.json()).toEqual({
        status: "down",
        checks: [["relay", "up"], ["memory", "up"], ["db", "down"], ["broker", "down"], ["slow", "down"]].map((
          [name, status]
        ) => ({ name, status }))
      })
      // The admin: why each one is down.
      const down = await probes.request("/ready", { headers: auth })
      const downReport = (await down.json()) as Health.Report
      expect(down.status).toBe(503)
      expect(downReport.status).toBe("down")
      expect(downReport.checks.map((c) => [c.name, c.status, c.message])).toEqual([
        ["relay", "up", undefined],
        ["memory", "up", undefined],
        ["db", "down", "PublishError: db unreachable"],
        ["broker", "down", "broker not connected"],
        ["slow", "down", "timed out after 200ms"]
      ])
    })
  })

/** Without a relay, so that the state a retry leaves behind can be seen before anyone publishes. */
const retrySuite = (name: string, makeRuntime: () => Promise<Runtime.Runtime<any>>) =>
  describe(`Routes: a retried event is pending again (${name})`, () => {
    it("POST /outbox/failed/:id/retry moves a failed event back to pending with its attempts reset", async () => {
      const rt = await makeRuntime()
      try {
        const app = new Hono()
        app.route("/outbox", Routes.outbox(rt, { auth: token }))
        const message = await rt.runPromise(
          Outbox.transaction(Outbox.append(Shipped, { aggregateId: "p-1", payload: { n: 7 } }))
        )
        await rt.runPromise(OutboxStore.use((s) =>
          Effect.gen(function*() {
            const claimed = yield* s.claim({ relayId: "test", batchSize: 10, lease: Duration.seconds(30) })
            expect(claimed.map((c) => c.message.id)).toEqual([message.id])
            yield* s.settle("test", { published: [], retry: [], failed: [{ id: message.id, error: "refused" }] })
          })
        ))
        const before = (await (await app.request("/outbox/stats", { headers: auth })).json()) as OutboxStoreNs.Stats
        expect([before.failed, before.pending]).toEqual([1, 0])
        const res = await app.request(`/outbox/failed/${message.id}/retry`, { method: "POST", headers: auth })
        expect([res.status, await res.json()]).toEqual([200, { retried: 1 }])
        const after = (await (await app.request("/outbox/stats", { headers: auth })).json()) as OutboxStoreNs.Stats
        expect([after.failed, after.pending]).toEqual([0, 1])
        const again = await rt.runPromise(
          OutboxStore.use((s) => s.claim({ relayId: "test", batchSize: 10, lease: Duration.seconds(30) }))
        )
        expect(again.map((c) => [c.message.id, c.attempts])).toEqual([[message.id, 1]])
      } finally {
        await rt.dispose()
      }
    })
  })

retrySuite("memory stores", () => Runtime.make(memoryLayer({ relay: false })))
retrySuite("postgres", () => Runtime.make(pgLayer(undefined, { relay: false })))

routesSuite("memory stores", () => Runtime.make(memoryLayer()), [Health.up("stores")])
routesSuite("postgres", () => Runtime.make(pgLayer()), [PgClient.readiness])
