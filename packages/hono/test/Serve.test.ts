import { describe, expect, it } from "@effect/vitest"
import * as MemoryOutboxStore from "@tidings/core/MemoryOutboxStore"
import type * as OutboxStore from "@tidings/core/OutboxStore"
import { Effect, Exit, Redacted, Scope } from "effect"
import { Hono } from "hono"
import { setImmediate } from "node:timers/promises"
import * as HttpErrors from "../src/HttpErrors.ts"
import * as Routes from "../src/Routes.ts"
import * as Runtime from "../src/Runtime.ts"
import * as Serve from "../src/Serve.ts"

declare const Deno: unknown

/** Holds `/slow` requests: `reached` resolves when one is in its handler, `release()` lets it answer. */
const makeGate = () => {
  let arrive = () => {}
  let release = () => {}
  const reached = new Promise<void>((resolve) => arrive = resolve)
  const released = new Promise<void>((resolve) => release = resolve)
  return { reached, released, arrive: () => arrive(), release: () => release() }
}

const appWith = (rt: Runtime.Runtime<OutboxStore.OutboxStore>, gate = makeGate()) => {
  const app = new Hono()
  app.onError(HttpErrors.onError)
  app.notFound(HttpErrors.notFound)
  app.route("/admin", Routes.all(rt, { auth: Redacted.make("t0ken-0123456789abcdef-0123456789ab") }))
  app.get(
    "/slow",
    rt.handler(() => Effect.promise(() => (gate.arrive(), gate.released)).pipe(Effect.as({ slow: true })))
  )
  app.post("/echo", rt.handler((c) => Effect.promise(() => c.req.json())))
  return app
}

describe(`Serve on ${typeof Deno !== "undefined" ? "Deno (Deno.serve)" : "Node (@hono/node-server)"}`, () => {
  it("listens on a free port, answers fetch() over the network, and stops on close()", async () => {
    const rt = await Runtime.make(MemoryOutboxStore.layer)
    const server = await Serve.serve(appWith(rt))
    try {
      expect(server.port).toBeGreaterThan(0)
      expect(server.hostname).toBe("127.0.0.1")
      expect(server.url).toBe(`http://127.0.0.1:${server.port}`)

      const health = await fetch(`${server.url}/admin/health`)
      expect([health.status, await health.json()]).toEqual([200, { status: "up" }])
      const stats = await fetch(`${server.url}/admin/outbox/stats`, {
        headers: { authorization: "Bearer t0ken-0123456789abcdef-0123456789ab" }
      })
      expect(stats.status).toBe(200)
      expect(((await stats.json()) as OutboxStore.Stats).pending).toBe(0)
      const denied = await fetch(`${server.url}/admin/outbox/stats`)
      expect(denied.status).toBe(401)
      await denied.body?.cancel()
      const echo = await fetch(`${server.url}/echo`, {
        method: "POST",
        body: JSON.stringify({ a: [1, "b"] }),
        headers: { "content-type": "application/json" }
      })
      expect(await echo.json()).toEqual({ a: [1, "b"] })
      const missing = await fetch(`${server.url}/nope`)
      expect([missing.status, ((await missing.json()) as HttpErrors.ErrorBody).error.tag]).toEqual([404, "NotFound"])
      const metrics = await fetch(`${server.url}/admin/metrics`)
      expect(metrics.headers.get("content-type")).toContain("version=0.0.4")
      await metrics.body?.cancel()
    } finally {
      await server.close()
      await rt.dispose()
    }
    await expect(fetch(`${server.url}/admin/health`)).rejects.toThrow()
  })

  it("close() lets an in-flight request finish", async () => {
    const rt = await Runtime.make(MemoryOutboxStore.layer)
    const gate = makeGate()
    const server = await Serve.serve(appWith(rt, gate), { gracePeriodMs: 60_000 })
    try {
      const inFlight = fetch(`${server.url}/slow`)
      await gate.reached
      const closed = server.close()
      let closedEarly = false
      void closed.then(() => closedEarly = true)
      await setImmediate() // the event loop turned: a close() that did not wait would be done
      expect(closedEarly, "close() waits for the request in flight").toBe(false)
      gate.release()
      const res = await inFlight
      expect([res.status, await res.json()]).toEqual([200, { slow: true }])
      await closed
      await server.close() // idempotent
    } finally {
      await rt.dispose()
    }
  })

  it("a port in use or out of range is a ServeError", async () => {
    const first = await Serve.serve(() => new Response("first"))
    try {
      await expect(Serve.serve(() => new Response("second"), { port: first.port })).rejects.toBeInstanceOf(
        Serve.ServeError
      )
      expect(await (await fetch(first.url)).text()).toBe("first")
    } finally {
      await first.close()
    }
    await expect(Serve.serve(() => new Response(""), { port: 70_000 })).rejects.toBeInstanceOf(Serve.ServeError)
    await expect(Serve.serve(() => new Response(""), { port: 1.5 })).rejects.toBeInstanceOf(Serve.ServeError)
  })

  it("Serve.scoped listens for the scope's life", async () => {
    const scope = await Effect.runPromise(Scope.make())
    const server = await Effect.runPromise(Serve.scoped(() => new Response("scoped")).pipe(Scope.provide(scope)))
    expect(await (await fetch(server.url)).text()).toBe("scoped")
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await expect(fetch(server.url)).rejects.toThrow()
  })
})
