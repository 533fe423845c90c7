/**
 * The safe HTTP defaults against a real server (`Serve.serve`: @hono/node-server on Node, Deno.serve
 * on Deno), over raw sockets where fetch would hide what is checked: bodies over the limit are
 * refused before they are read (declared or streamed), JSON input needs its content type, bad
 * paths and queries answer 400 without an error log, unknown routes and methods answer in the JSON
 * error shape, `/ready` keeps its details for the admin, and no error text reaches a client.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { InvalidConfig, Rejected, StoreError, Unavailable } from "@tidings/core/Errors"
import * as Health from "@tidings/core/Health"
import * as MemoryOutboxStore from "@tidings/core/MemoryOutboxStore"
import * as OutboxStore from "@tidings/core/OutboxStore"
import { Effect, Redacted, Schema } from "effect"
import { Hono } from "hono"
import { afterEach, vi } from "vitest"
import { send } from "../../../test/support/rawHttp.ts"
import * as Input from "../src/Input.ts"
import * as Routes from "../src/Routes.ts"
import * as Runtime from "../src/Runtime.ts"
import * as Safety from "../src/Safety.ts"
import * as Serve from "../src/Serve.ts"

declare const Deno: unknown
const runtimeName = typeof Deno !== "undefined" ? "Deno" : "Node"

const tokenText = "safety-admin-token-0123456789abcdef"
const admin = { authorization: `Bearer ${tokenText}` }
const secret = "connect ECONNREFUSED 127.0.0.1:44043"
const MB = 1024 * 1024

const Order = Schema.Struct({ sku: Schema.String, quantity: Schema.Int })

describe(`Safety: the safe HTTP defaults on a real ${runtimeName} server`, () => {
  let rt: Runtime.Runtime<OutboxStore.OutboxStore>
  let server: Serve.Server
  let handled = 0
  const logged: Array<string> = []

  beforeAll(async () => {
    rt = await Runtime.make(MemoryOutboxStore.layer)
    const app = Safety.app()
    app.post(
      "/orders",
      rt.handler((c) =>
        Effect.map(Input.json(c, Order), (order) => {
          handled++
          return order
        }), { status: 202 })
    )
    app.get(
      "/orders/:id",
      rt.handler((c) => Effect.sync(() => (handled++, { id: c.req.param("id"), q: c.req.query("q") ?? null })))
    )
    // A plain Hono route reading the body itself: the streamed limit holds for it too.
    app.post("/raw", async (c) => c.json({ length: (await c.req.text()).length }))
    app.get("/defect", rt.handler(() => Effect.die(new Error(`the database said ${secret}`))))
    app.get(
      "/store-down",
      rt.handler(() =>
        Effect.fail(
          new StoreError({
            operation: "claim",
            message: `password authentication failed: ${secret}`,
            reason: new Unavailable()
          })
        )
      )
    )
    app.get(
      "/store-broken",
      rt.handler(() =>
        Effect.fail(
          new StoreError({ operation: "claim", message: `syntax error at ${secret}`, reason: new Rejected() })
        )
      )
    )
    app.get("/thrown", () => {
      throw new Error(`thrown with ${secret}`)
    })
    app.route(
      "/",
      Routes.health(rt, {
        checks: [Health.up("memory"), Health.make("postgres", Effect.fail(new Error(secret)))],
        auth: Redacted.make(tokenText)
      })
    )
    app.route("/admin/outbox", Routes.outbox(rt, { auth: Redacted.make(tokenText) }))
    server = await Serve.serve(app)
  })
  afterAll(async () => {
    await server?.close()
    await rt?.dispose()
  })

  // Everything printed while a test runs: the checks below that say "without an error log" read it.
  beforeAll(() => {
    for (const level of ["error", "warn", "log", "info"] as const) {
      vi.spyOn(console, level).mockImplementation((...args: Array<unknown>) =>
        void logged.push(args.map(String).join(" "))
      )
    }
  })
  afterAll(() => vi.restoreAllMocks())
  afterEach(() => void logged.splice(0))

  it("a 200 MB body with Content-Length: 413 in the JSON shape, before the server reads it", async () => {
    const before = handled
    const reply = await send(server.port, {
      target: "/orders",
      headers: { "content-type": "application/json" },
      size: 200 * MB,
      // 8 of the 200 MB, then wait for the answer: a server that read the body first would never give one.
      pauseAfter: 8 * MB
    })
    expect(reply.status).toBe(413)
    expect(reply.json).toEqual({
      error: { tag: "PayloadTooLarge", message: "the request body is larger than 1048576 bytes" }
    })
    expect(handled).toBe(before)
  })

  it("a 200 MB chunked body: 413 once the count passes the limit, the rest never read; also for a plain route", async () => {
    for (const target of ["/orders", "/raw"]) {
      const reply = await send(server.port, {
        target,
        headers: { "content-type": "application/json" },
        size: 200 * MB,
        chunked: true,
        pauseAfter: 8 * MB
      })
      expect(reply.status, target).toBe(413)
      expect(reply.json.error.tag, target).toBe("PayloadTooLarge")
    }
    // Under the limit, chunked bodies go through.
    const ok = await send(server.port, {
      target: "/raw",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ pad: "x".repeat(200_000) }),
      chunked: true
    })
    expect(ok.status).toBe(200)
    expect(ok.json).toEqual({ length: 200_010 })
  })

  it("10 MB of nested [ is cut at the limit while /health keeps answering; 1 MB of it is refused before JSON.parse", async () => {
    let healthy = 0
    let uploading = true
    const upload = send(server.port, {
      target: "/orders",
      headers: { "content-type": "application/json" },
      size: 10 * MB,
      fill: "[",
      chunked: true,
      pauseAfter: 4 * MB
    })
      .finally(() => void (uploading = false))
    const probes = (async () => {
      // At least one probe, however fast the upload is refused.
      do {
        const res = await fetch(`${server.url}/health`)
        if (res.status === 200) healthy++
        await res.body?.cancel()
      } while (uploading)
    })()
    const [reply] = await Promise.all([upload, probes])
    expect(reply.status).toBe(413)
    expect(healthy).toBeGreaterThan(0)

    const nested = "[".repeat(500_000) + "]".repeat(500_000)
    const deep = await send(server.port, {
      target: "/orders",
      headers: { "content-type": "application/json" },
      body: nested
    })
    expect(deep.status).toBe(400)
    expect(deep.json.error).toMatchObject({ tag: "BadRequest", message: "the request body is nested too deeply" })
    // 64 levels are fine (the schema then says what is wrong with the value).
    const shallow = await send(server.port, {
      target: "/orders",
      headers: { "content-type": "application/json" },
      body: "[".repeat(64) + "]".repeat(64)
    })
    expect(shallow.status).toBe(400)
    expect(shallow.json.error.message).toBe("invalid body")
  })

  it("JSON input needs application/json: a cross-site text/plain or form post gets 415, not 202", async () => {
    const body = JSON.stringify({ sku: "book", quantity: 1 })
    const before = handled
    for (
      const type of [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        undefined
      ]
    ) {
      const res = await fetch(`${server.url}/orders`, {
        method: "POST",
        body,
        headers: type === undefined ? {} : { "content-type": type }
      })
      const json = (await res.json()) as { error: { tag: string } }
      // fetch adds text/plain to a string body without a content type
      expect(res.status, String(type)).toBe(415)
      expect(json.error.tag).toBe("UnsupportedMediaType")
    }
    expect(handled).toBe(before)
    for (const type of ["application/json", "application/json; charset=utf-8", "application/vnd.api+json"]) {
      const res = await fetch(`${server.url}/orders`, { method: "POST", body, headers: { "content-type": type } })
      expect(res.status, type).toBe(202)
      expect(await res.json()).toEqual({ sku: "book", quantity: 1 })
    }
    // Invalid UTF-8 and \u0000 in a JSON body: 400 before parsing.
    const latin1 = await send(server.port, {
      target: "/orders",
      headers: { "content-type": "application/json" },
      body: "{\"sku\":\"\xff\"}"
    })
    expect(latin1.status).toBe(400)
    const nul = await fetch(`${server.url}/orders`, {
      method: "POST",
      body: "{\"sku\":\"a\\u0000b\",\"quantity\":1}",
      headers: { "content-type": "application/json" }
    })
    expect(nul.status).toBe(400)
    expect(((await nul.json()) as { error: { message: string } }).error.message).toBe(
      "the request body contains a NUL character"
    )
  })

  it("NUL bytes and invalid UTF-8 in paths and queries: 400 in the JSON shape, no handler, no error log", async () => {
    const before = handled
    for (
      const target of [
        "/orders/%00",
        "/orders/a%00b",
        "/orders/%ff",
        "/orders/%c3%28",
        "/orders/100%",
        "/orders/1?q=%00",
        "/orders/1?q=%ff",
        "/orders/1?%00=x",
        "/orders/1?q=a+%e2%82"
      ]
    ) {
      const reply = await send(server.port, { method: "GET", target })
      expect(reply.status, target).toBe(400)
      expect(reply.json.error.tag, target).toBe("BadRequest")
      expect(reply.json.error.message, target).toMatch(
        /^the (path|query) is not valid percent-encoded UTF-8, or holds a NUL byte$/
      )
    }
    expect(handled).toBe(before)
    expect(logged).toEqual([])
    // Valid encodings still reach the handler, decoded.
    const ok = await send(server.port, { method: "GET", target: "/orders/caf%C3%A9?q=%E2%82%AC+1" })
    expect(ok.status).toBe(200)
    expect(ok.json).toEqual({ id: "café", q: "€ 1" })
  })

  it("without Safety installed, Input still refuses a NUL in path parameters and the query: 400, not a database error", async () => {
    const plain = new Hono()
    plain.get("/x/:id", rt.handler((c) => Effect.map(Input.param(c, "id", Schema.String), (id) => ({ id }))))
    plain.get("/q", rt.handler((c) => Input.query(c, Schema.Struct({ q: Schema.String }))))
    for (const path of ["/x/a%00b", "/q?q=%00"]) {
      const res = await plain.request(path)
      expect(res.status, path).toBe(400)
      expect(((await res.json()) as { error: { issues: Array<{ message: string }> } }).error.issues[0]!.message).toBe(
        "a NUL character is not accepted"
      )
    }
    expect(await (await plain.request("/x/ab")).json()).toEqual({ id: "ab" })
  })

  it("unknown routes answer 404 and known paths with another method 405 with Allow, in the JSON error shape", async () => {
    const missing = await fetch(`${server.url}/nothing/here`)
    expect(missing.status).toBe(404)
    expect(missing.headers.get("content-type")).toMatch(/^application\/json/)
    expect(await missing.json()).toEqual({ error: { tag: "NotFound", message: "no route for GET /nothing/here" } })

    const wrongMethod = await fetch(`${server.url}/orders/1`, { method: "DELETE" })
    expect(wrongMethod.status).toBe(405)
    expect(wrongMethod.headers.get("allow")).toBe("GET, HEAD")
    expect(await wrongMethod.json()).toEqual({
      error: { tag: "MethodNotAllowed", message: "DELETE is not allowed here; allowed: GET, HEAD" }
    })
    const put = await fetch(`${server.url}/orders`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: "{}"
    })
    expect(put.status).toBe(405)
    expect(put.headers.get("allow")).toBe("POST")
    // Mounted sub-apps count; their guard runs first.
    const mounted = await fetch(`${server.url}/admin/outbox/stats`, { method: "POST", headers: admin })
    expect(mounted.status).toBe(405)
    expect(mounted.headers.get("allow")).toBe("GET, HEAD")
    expect((await fetch(`${server.url}/admin/outbox/stats`, { method: "POST" })).status).toBe(401)
  })

  it("/ready: names and up/down for anyone, the reasons only with the admin token", async () => {
    const anonymous = await fetch(`${server.url}/ready`)
    expect(anonymous.status).toBe(503)
    const text = await anonymous.text()
    expect(JSON.parse(text)).toEqual({
      status: "down",
      checks: [{ name: "memory", status: "up" }, { name: "postgres", status: "down" }]
    })
    expect(text).not.toContain("ECONNREFUSED")
    const wrong = await fetch(`${server.url}/ready`, {
      headers: { authorization: "Bearer not-the-admin-token-0123456789abcdef" }
    })
    expect(await wrong.text()).not.toContain("ECONNREFUSED")
    const detailed = await fetch(`${server.url}/ready`, { headers: admin })
    expect(detailed.status).toBe(503)
    const report = (await detailed.json()) as Health.Report
    expect(report.checks.find((c) => c.name === "postgres")).toMatchObject({ status: "down", message: secret })
    expect(report.checks[0]!.durationMs).toBeTypeOf("number")
  })

  it("no error text in any response: defects, store errors and thrown errors answer generic messages (and are logged)", async () => {
    for (
      const [route, status, tag, message] of [
        ["/defect", 500, "InternalError", "internal error"],
        ["/store-down", 503, "StoreError", "temporarily unavailable, retry later"],
        ["/store-broken", 500, "StoreError", "internal error"],
        ["/thrown", 500, "InternalError", "internal error"]
      ] as const
    ) {
      const res = await fetch(`${server.url}${route}`)
      const text = await res.text()
      expect(res.status, route).toBe(status)
      expect(JSON.parse(text), route).toEqual({ error: { tag, message } })
      expect(text, route).not.toContain("ECONNREFUSED")
    }
    // The operator still has the details, in the log (which also shows the log capture works).
    expect(logged.join("\n")).toContain(secret)
  })

  it("bad limits are configuration errors at construction", () => {
    for (
      const options of [{ bodyLimit: 0 }, { bodyLimit: -1 }, { bodyLimit: 1.5 }, { bodyLimit: Number.NaN }, {
        maxJsonDepth: 0
      }]
    ) {
      expect(() => Safety.middleware(options), JSON.stringify(options)).toThrow(InvalidConfig)
    }
    expect(Safety.limits({ bodyLimit: 10 * MB })).toEqual({ bodyLimit: 10 * MB, maxJsonDepth: 64 })
  })

  it("the limit is configurable: a smaller one refuses what the default takes", async () => {
    const small = Safety.app({ bodyLimit: 1000 })
    small.post("/orders", rt.handler((c) => Input.json(c, Order)))
    const tiny = await Serve.serve(small)
    try {
      const body = JSON.stringify({ sku: "x".repeat(2000), quantity: 1 })
      const declared = await send(tiny.port, {
        target: "/orders",
        headers: { "content-type": "application/json" },
        body
      })
      expect(declared.status).toBe(413)
      expect(declared.json.error.message).toBe("the request body is larger than 1000 bytes")
      const streamed = await send(tiny.port, {
        target: "/orders",
        headers: { "content-type": "application/json" },
        body,
        chunked: true
      })
      expect(streamed.status).toBe(413)
      const fits = await send(tiny.port, {
        target: "/orders",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ sku: "x", quantity: 1 })
      })
      expect(fits.status).toBe(200)
    } finally {
      await tiny.close()
    }
  })
})
