import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { eventually } from "@tidings/core/testing"
import { Effect, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Hono } from "hono"
import { schemaName } from "../../../test/support/pg.ts"
import * as Command from "../src/Command.ts"
import * as Input from "../src/Input.ts"
import * as Runtime from "../src/Runtime.ts"
import { json, memoryLayer, pgLayer, waitUntil } from "./support.ts"

const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, total: Schema.Int })
})
const PlaceOrder = Schema.Struct({
  orderId: Schema.String.check(Schema.isUUID()),
  total: Schema.Int.check(Schema.isGreaterThan(0)),
  fail: Schema.optional(Schema.Boolean)
})
class OrderRejected extends Schema.TaggedError<OrderRejected>()("OrderRejected", { message: Schema.String }) {}

const uuid = () => crypto.randomUUID()

type Body = {
  error: { tag: string; message: string; issues?: Array<{ path: Array<string | number>; message: string }> }
}

/** The same command routes over any store: `write` stores the entity in the command's transaction. */
const commandApp = <R>(
  rt: Runtime.Runtime<R | OutboxStore>,
  write: (orderId: string, total: number) => Effect.Effect<void, never, R | OutboxStore>
) => {
  const app = new Hono()
  app.post(
    "/orders",
    Command.handler(
      rt,
      { body: PlaceOrder, status: 201, statuses: { OrderRejected: 422 } },
      ({ body }) =>
        Effect.gen(function*() {
          yield* write(body.orderId, body.total)
          yield* Outbox.append(OrderPlaced, {
            aggregateId: body.orderId,
            payload: { orderId: body.orderId, total: body.total }
          })
          // Fails after both writes: the transaction must roll them back.
          if (body.fail === true) {
            return yield* new OrderRejected({ message: "rejected after writing" })
          }
          return { id: body.orderId }
        })
    )
  )
  app.post(
    "/orders/:id/notes",
    Command.handler(rt, {
      params: Schema.Struct({ id: Schema.String.check(Schema.isUUID()) }),
      query: Schema.Struct({ limit: Schema.optional(Schema.NumberFromString.check(Schema.isInt())) }),
      body: Schema.Struct({ text: Schema.String })
    }, ({ body, params, query }) => Effect.succeed({ id: params.id, text: body.text, limit: query.limit ?? null }))
  )
  app.get(
    "/items/:id",
    rt.handler((c) => Effect.map(Input.param(c, "id", Schema.String.check(Schema.isUUID())), (id) => ({ id })))
  )
  return app
}

/** Runs the command tests against one setup. */
const commandSuite = (
  name: string,
  setup: () => Promise<{ rt: Runtime.Runtime<any>; app: Hono; entities: () => Promise<ReadonlyArray<string>> }>
) =>
  describe(`Command.handler (${name})`, () => {
    let ctx: Awaited<ReturnType<typeof setup>>
    beforeAll(async () => {
      ctx = await setup()
    })
    afterAll(async () => {
      await ctx?.rt.dispose()
    })

    it("writes the entity and appends its event in one transaction, answers with the chosen status; a relay publishes", async () => {
      const id = uuid()
      const res = await ctx.app.request("/orders", json({ orderId: id, total: 42 }))
      expect(res.status).toBe(201)
      expect(await res.json()).toEqual({ id })
      await waitUntil(async () => (await ctx.entities()).includes(id), 10_000, "the entity")
      await waitUntil(
        async () =>
          (await ctx.rt.runPromise(MemoryBroker.MemoryBroker.use((b) => b.delivered))).some((d) =>
            d.message.aggregateId === id
          ),
        10_000,
        "publish"
      )
    })

    it("a failing handler rolls back the entity and its event, and maps its error", async () => {
      const id = uuid()
      const res = await ctx.app.request("/orders", json({ orderId: id, total: 5, fail: true }))
      expect(res.status).toBe(422)
      expect(((await res.json()) as Body).error).toEqual({ tag: "OrderRejected", message: "rejected after writing" })
      expect(await ctx.entities()).not.toContain(id)
      // once the relay has settled everything (earlier tests' events included), nothing of this one was sent
      await ctx.rt.runPromise(eventually(
        OutboxStore.use((s) => s.stats).pipe(Effect.map((st) => st.pending + st.processing === 0)),
        "5 seconds",
        "a settled outbox"
      ))
      const delivered = await ctx.rt.runPromise(MemoryBroker.MemoryBroker.use((b) => b.delivered))
      expect(delivered.some((d) => d.message.aggregateId === id)).toBe(false)
    })

    it("malformed JSON is a 400 with an issue, never a 500", async () => {
      for (const raw of ["{\"orderId\": ", "not json", ""]) {
        const res = await ctx.app.request("/orders", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: raw
        })
        const body = (await res.json()) as Body
        expect(res.status, raw).toBe(400)
        expect(body.error.tag).toBe("BadRequest")
        expect(body.error.issues?.[0]?.path).toEqual(["body"])
      }
    })

    it("a body failing its schema is a 400 listing every issue with its path", async () => {
      const res = await ctx.app.request("/orders", json({ orderId: "not-a-uuid", total: -1 }))
      const body = (await res.json()) as Body
      expect(res.status).toBe(400)
      expect(body.error.tag).toBe("BadRequest")
      expect(body.error.issues?.map((i) => i.path)).toEqual([["body", "orderId"], ["body", "total"]])
      expect(body.error.issues?.every((i) => i.message.length > 0)).toBe(true)
      const wrongType = await ctx.app.request("/orders", json([1, 2]))
      expect(wrongType.status).toBe(400)
    })

    it("path and query parameters are decoded too: 400 with their path", async () => {
      const id = uuid()
      const ok = await ctx.app.request(`/orders/${id}/notes?limit=5`, json({ text: "hi" }))
      expect([ok.status, await ok.json()]).toEqual([200, { id, text: "hi", limit: 5 }])
      const badParam = await ctx.app.request("/orders/xyz/notes", json({ text: "hi" }))
      expect(badParam.status).toBe(400)
      expect(((await badParam.json()) as Body).error.issues?.[0]?.path).toEqual(["params", "id"])
      const badQuery = await ctx.app.request(`/orders/${id}/notes?limit=many`, json({ text: "hi" }))
      expect(badQuery.status).toBe(400)
      expect(((await badQuery.json()) as Body).error.issues?.[0]?.path).toEqual(["query", "limit"])
      const single = await ctx.app.request("/items/42")
      expect(single.status).toBe(400)
      expect(((await single.json()) as Body).error.issues?.[0]?.path).toEqual(["params", "id"])
    })

    it("Command.transaction retries a retryable failure along the schedule, not a permanent one", async () => {
      let attempts = 0
      const flaky = Effect.suspend(() =>
        ++attempts < 3 ? Effect.fail({ _tag: "Busy", isRetryable: true }) : Effect.succeed("ok")
      )
      const retried = await ctx.rt.runPromise(Command.transaction(flaky, Schedule.recurs(5)))
      expect([retried, attempts]).toEqual(["ok", 3])
      let permanent = 0
      const exit = await ctx.rt.runPromiseExit(
        Command.transaction(
          Effect.suspend(() => (permanent++, Effect.fail({ _tag: "Nope", isRetryable: false }))),
          Schedule.recurs(5)
        )
      )
      expect([exit._tag, permanent]).toEqual(["Failure", 1])
    })
  })

commandSuite("memory stores", async () => {
  const rt = await Runtime.make(memoryLayer())
  // Memory stores have no entity table: the order's event stands for it (the memory outbox store's
  // transaction drops its writes on failure, like Postgres).
  const app = commandApp(rt, () => Effect.void)
  return {
    rt,
    app,
    entities: async () => {
      const delivered = await rt.runPromise(MemoryBroker.MemoryBroker.use((b) => b.delivered))
      return delivered.map((d) => d.message.aggregateId)
    }
  }
})

commandSuite("postgres", async () => {
  const schema = schemaName("hcmd")
  const rt = await Runtime.make(pgLayer(schema))
  const table = `${schema}.orders`
  await rt.runPromise(
    SqlClient.SqlClient.use((sql) => sql`CREATE TABLE ${sql(table)} (id uuid PRIMARY KEY, total int NOT NULL)`)
  )
  const app = commandApp(
    rt,
    (orderId, total) =>
      SqlClient.SqlClient.use((sql) => sql`INSERT INTO ${sql(table)} (id, total) VALUES (${orderId}, ${total})`).pipe(
        Effect.orDie
      )
  )
  return {
    rt,
    app,
    entities: () =>
      rt.runPromise(
        SqlClient.SqlClient.use((sql) => sql<{ id: string }>`SELECT id FROM ${sql(table)}`).pipe(
          Effect.map((rows) => rows.map((r) => r.id))
        )
      )
  }
})
