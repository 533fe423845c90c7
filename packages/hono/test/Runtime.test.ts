import { describe, expect, it } from "@effect/vitest"
import { Rejected, StoreError, Unavailable } from "@tidings/core/Errors"
import { Cause, Context, Deferred, Effect, Layer, Logger, Schema } from "effect"
import { Hono } from "hono"
import * as HttpErrors from "../src/HttpErrors.ts"
import * as Runtime from "../src/Runtime.ts"

class Counter extends Context.Service<Counter, { readonly next: Effect.Effect<number> }>()("test/Counter") {}

/** A layer that records how often it was built and released. */
const tracked = () => {
  const events: Array<string> = []
  const layer = Layer.effect(
    Counter,
    Effect.gen(function*() {
      yield* Effect.acquireRelease(
        Effect.sync(() => events.push("built")),
        () => Effect.sync(() => void events.push("released"))
      )
      let n = 0
      return Counter.of({ next: Effect.sync(() => ++n) })
    })
  )
  return { events, layer }
}

class OutOfStock extends Schema.TaggedError<OutOfStock>()("OutOfStock", { sku: Schema.String }) {}

const body = async (res: Response) => (await res.json()) as HttpErrors.ErrorBody & Record<string, unknown>

describe("Runtime", () => {
  it("builds the layers once at start, shares them across requests, and releases them on dispose", async () => {
    const { events, layer } = tracked()
    const rt = await Runtime.make(layer)
    expect(events).toEqual(["built"]) // built by make, before any request
    const app = new Hono()
    app.get("/n", rt.handler(() => Effect.map(Counter.use((c) => c.next), (n) => ({ n }))))
    const ns: Array<number> = []
    for (let i = 0; i < 5; i++) ns.push(((await (await app.request("/n")).json()) as { n: number }).n)
    expect(ns).toEqual([1, 2, 3, 4, 5]) // one service instance
    expect(events).toEqual(["built"])
    await rt.dispose()
    expect(events).toEqual(["built", "released"])
    await rt.dispose() // idempotent
    expect(events).toEqual(["built", "released"])
    // Disposed: requests get a 503 instead of rebuilding the layers.
    const late = await app.request("/n")
    expect([late.status, ((await late.json()) as HttpErrors.ErrorBody).error.tag]).toEqual([503, "ShuttingDown"])
    expect(events).toEqual(["built", "released"])
  })

  it("rejects with RuntimeBuildError when the layers fail, after releasing what was built", async () => {
    const { events, layer } = tracked()
    const failing = Layer.effectDiscard(
      Effect.fail(new StoreError({ operation: "connect", message: "db down", reason: new Unavailable() }))
    )
    const error = await Runtime.make(Layer.merge(layer, failing.pipe(Layer.provide(layer)))).then(
      () => undefined,
      (e: unknown) => e
    )
    expect(error).toBeInstanceOf(Runtime.RuntimeBuildError)
    expect((error as Runtime.RuntimeBuildError).failure).toBeInstanceOf(StoreError)
    expect((error as Error).message).toContain("StoreError")
    expect(events).toEqual(["built", "released"])
  })

  it("answers a Response as is, undefined as 204, anything else as JSON with the chosen status", async () => {
    const rt = await Runtime.make(Layer.empty)
    try {
      const app = new Hono()
      app.get("/raw", rt.handler(() => Effect.succeed(new Response("hi", { status: 202, headers: { "x-a": "1" } }))))
      app.get("/none", rt.handler(() => Effect.void))
      app.post(
        "/created",
        rt.handler(() => Effect.succeed({ id: "a", at: new Date(0), big: 2n ** 70n }), { status: 201 })
      )
      const raw = await app.request("/raw")
      expect([raw.status, await raw.text(), raw.headers.get("x-a")]).toEqual([202, "hi", "1"])
      const none = await app.request("/none")
      expect([none.status, await none.text()]).toEqual([204, ""])
      const created = await app.request("/created", { method: "POST" })
      expect(created.status).toBe(201)
      expect(created.headers.get("content-type")).toContain("application/json")
      expect(await created.json()).toEqual({ id: "a", at: "1970-01-01T00:00:00.000Z", big: "1180591620717411303424" })
    } finally {
      await rt.dispose()
    }
  })

  it("maps typed errors to statuses in one JSON shape, and never leaks a defect", async () => {
    const logged: Array<{ level: string; text: string }> = []
    const capture = Logger.layer([Logger.make(({ cause, logLevel, message }) => {
      logged.push({ level: logLevel, text: `${JSON.stringify(message)} ${Cause.pretty(cause)}` })
    })])
    const rt = await Runtime.make(capture, { statuses: { OutOfStock: 409 } })
    try {
      const app = new Hono()
      app.get("/nf", rt.handler(() => new HttpErrors.NotFound({ message: "no order 1" })))
      app.get(
        "/bad",
        rt.handler(() =>
          new HttpErrors.BadRequest({
            message: "nope",
            issues: [{ path: ["body", "x"], message: "Expected a number" }]
          })
        )
      )
      app.get("/oos", rt.handler(() => new OutOfStock({ sku: "a" })))
      app.get("/oos-override", rt.handler(() => new OutOfStock({ sku: "a" }), { statuses: { OutOfStock: 422 } }))
      app.get(
        "/busy",
        rt.handler(() =>
          new StoreError({ operation: "claim", message: "connection refused to 10.0.0.1", reason: new Unavailable() })
        )
      )
      app.get(
        "/broken",
        rt.handler(() =>
          new StoreError({ operation: "claim", message: "syntax error at SELECT secret", reason: new Rejected() })
        )
      )
      app.get("/defect", rt.handler(() => Effect.die(new Error("bug with secret detail"))))
      app.get(
        "/throws",
        rt.handler(() => {
          throw new Error("thrown secret")
        })
      )

      const nf = await app.request("/nf")
      expect([nf.status, await body(nf)]).toEqual([404, { error: { tag: "NotFound", message: "no order 1" } }])
      const bad = await app.request("/bad")
      expect([bad.status, await body(bad)]).toEqual([400, {
        error: { tag: "BadRequest", message: "nope", issues: [{ path: ["body", "x"], message: "Expected a number" }] }
      }])
      expect((await app.request("/oos")).status).toBe(409)
      expect((await app.request("/oos-override")).status).toBe(422)
      const busy = await app.request("/busy")
      expect(busy.status).toBe(503)
      expect(busy.headers.get("retry-after")).toBe("1")
      const busyBody = await busy.text()
      expect(JSON.parse(busyBody).error.tag).toBe("StoreError")
      expect(busyBody).not.toContain("10.0.0.1")
      for (const path of ["/broken", "/defect", "/throws"]) {
        const res = await app.request(path)
        const text = await res.text()
        expect(res.status, path).toBe(500)
        expect(text, path).not.toMatch(/secret|stack|at /)
        expect(Object.keys(JSON.parse(text).error).sort()).toEqual(["message", "tag"])
      }
      // What the client does not see is logged, with the cause; client errors are not.
      expect(logged.map((l) => l.level)).toEqual(["Error", "Error", "Error", "Error"])
      expect(logged.map((l) => /connection refused|syntax error|bug with secret|thrown secret/.exec(l.text)?.[0]))
        .toEqual([
          "connection refused",
          "syntax error",
          "bug with secret",
          "thrown secret"
        ])
    } finally {
      await rt.dispose()
    }
  })

  it("interrupts the handler's effect when the client goes away", async () => {
    const rt = await Runtime.make(Layer.empty)
    try {
      const started = await rt.runPromise(Deferred.make<void>())
      const interrupted = await rt.runPromise(Deferred.make<void>())
      const app = new Hono()
      app.get(
        "/slow",
        rt.handler(() =>
          Deferred.succeed(started, undefined).pipe(
            Effect.andThen(Effect.never),
            Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
          )
        )
      )
      const abort = new AbortController()
      const pending = app.request("/slow", { signal: abort.signal })
      await rt.runPromise(Deferred.await(started))
      abort.abort()
      await rt.runPromise(Deferred.await(interrupted).pipe(Effect.timeout("5 seconds")))
      expect((await pending).status).toBe(503)
    } finally {
      await rt.dispose()
    }
  })

  it("HttpErrors.onError and notFound give the same shape to errors outside Effect handlers", async () => {
    const app = new Hono()
    app.onError(HttpErrors.onError)
    app.notFound(HttpErrors.notFound)
    app.get("/boom", () => {
      throw new Error("internal secret")
    })
    app.get("/typed", () => {
      throw new HttpErrors.Conflict({ message: "already shipped" })
    })
    const missing = await app.request("/nowhere")
    expect([missing.status, (await body(missing)).error.tag]).toEqual([404, "NotFound"])
    const boom = await app.request("/boom")
    const text = await boom.text()
    expect(boom.status).toBe(500)
    expect(text).not.toContain("secret")
    const typed = await app.request("/typed")
    expect([typed.status, await body(typed)]).toEqual([409, { error: { tag: "Conflict", message: "already shipped" } }])
  })

  it("statusOf: the built-in table", () => {
    expect(HttpErrors.statusOf({ _tag: "SagaNotFound" })).toBe(404)
    expect(HttpErrors.statusOf({ _tag: "OrderNotFound" })).toBe(404)
    expect(HttpErrors.statusOf({ _tag: "SagaConflict", isRetryable: true })).toBe(409)
    expect(HttpErrors.statusOf({ _tag: "InvalidEvent" })).toBe(400)
    expect(HttpErrors.statusOf({ _tag: "AmqpConnectionError", isRetryable: true })).toBe(503)
    expect(HttpErrors.statusOf({ _tag: "TimeoutError" })).toBe(503)
    expect(HttpErrors.statusOf({ _tag: "X", httpStatus: 418 })).toBe(418)
    expect(HttpErrors.statusOf({ _tag: "X", httpStatus: 200 })).toBe(500) // not an error status: ignored
    expect(HttpErrors.statusOf(new Error("plain"))).toBe(500)
  })
})
