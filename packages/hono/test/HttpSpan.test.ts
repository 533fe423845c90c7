/**
 * `Runtime.handler` runs each request in an HTTP server span (OpenTelemetry HTTP conventions) that
 * continues an incoming `traceparent`, so that an append made by the handler (and everything
 * downstream of it) is part of the caller's trace.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as Outbox from "@tidings/core/Outbox"
import { Effect, Layer, Option, Schema, Tracer } from "effect"
import { Hono } from "hono"
import * as Runtime from "../src/Runtime.ts"
import { memoryLayer } from "./support.ts"

const Placed = Event.define("http.placed", { aggregateType: "order", schema: Schema.Struct({ id: Schema.String }) })

class Boom extends Schema.TaggedError<Boom>()("Boom", { message: Schema.String }) {}

describe("Runtime.handler: the HTTP server span", () => {
  it("continues the caller's traceparent; the append is its child; method, route, path, status as attributes", async () => {
    const spans: Array<Tracer.NativeSpan> = []
    const tracer = Tracer.make({ span: (options) => (spans.push(new Tracer.NativeSpan(options)), spans.at(-1)!) })
    const rt = await Runtime.make(Layer.mergeAll(memoryLayer(), Layer.succeed(Tracer.Tracer, tracer)))
    try {
      const app = new Hono()
      app.post(
        "/orders/:id",
        rt.handler((c) => {
          const id = c.req.param("id") ?? ""
          return Effect.map(
            Outbox.transaction(Outbox.append(Placed, { aggregateId: id, payload: { id } })),
            (m) => ({ id: m.id })
          )
        }, { status: 201 })
      )
      app.get("/fail", rt.handler(() => Effect.fail(new Boom({ message: "no" })), { statuses: { Boom: 503 } }))
      const traceId = "0af7651916cd43dd8448eb211c80319c"
      const parentId = "b7ad6b7169203331"
      const res = await app.request("http://127.0.0.1:8080/orders/o-7", {
        method: "POST",
        headers: { traceparent: `00-${traceId}-${parentId}-01` }
      })
      assert.strictEqual(res.status, 201)

      const server = spans.find((s) => s.name === "POST /orders/:id")
      assert.isDefined(server, spans.map((s) => s.name).join(", "))
      assert.strictEqual(server!.kind, "server")
      assert.strictEqual(server!.traceId, traceId)
      assert.strictEqual(Option.getOrThrow(server!.parent).spanId, parentId)
      assert.deepInclude(Object.fromEntries(server!.attributes), {
        "http.request.method": "POST",
        "http.route": "/orders/:id",
        "url.path": "/orders/o-7",
        "url.scheme": "http",
        "server.address": "127.0.0.1",
        "server.port": 8080,
        "http.response.status_code": 201
      })
      const create = spans.find((s) => s.name === "create http.placed")!
      assert.strictEqual(create.traceId, traceId)
      assert.strictEqual(Option.getOrThrow(create.parent).spanId, server!.spanId)

      // Without a traceparent: a new trace; a 5xx answer carries error.type.
      const failed = await app.request("http://127.0.0.1:8080/fail")
      assert.strictEqual(failed.status, 503)
      const fail = spans.find((s) => s.name === "GET /fail")!
      assert.isTrue(Option.isNone(fail.parent))
      assert.notStrictEqual(fail.traceId, traceId)
      assert.deepInclude(Object.fromEntries(fail.attributes), { "http.response.status_code": 503, "error.type": "503" })
    } finally {
      await rt.dispose()
    }
  })
})
