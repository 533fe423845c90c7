import { describe, expect, it } from "@effect/vitest"
import { InvalidConfig } from "@tidings/core/Errors"
import * as MemorySagaStore from "@tidings/core/MemorySagaStore"
import { Redacted } from "effect"
import { Hono, type MiddlewareHandler } from "hono"
import * as Auth from "../src/Auth.ts"
import { equal } from "../src/internal/constantTime.ts"
import * as Routes from "../src/Routes.ts"
import * as Runtime from "../src/Runtime.ts"

const token = Redacted.make("s3cret-token-value-0123456789abcdef")
const missingSaga = "/sagas/0190a0f4-5b4e-7c3d-8a1b-2c3d4e5f6a7b"

const errorOf = async (res: Response) => ((await res.json()) as { error: { tag: string } }).error.tag

describe("Auth: admin routes are closed by default", () => {
  it("without a guard, every admin view answers 403, and so does `all`", async () => {
    const rt = await Runtime.make(MemorySagaStore.layer)
    try {
      const app = new Hono()
      app.route("/sagas", Routes.sagas(rt))
      app.route("/admin", Routes.all(rt))
      for (
        const path of [
          missingSaga,
          "/admin" + missingSaga,
          "/admin/outbox/stats",
          "/admin/outbox/failed",
          "/admin/inbox",
          "/admin/dead-letters"
        ]
      ) {
        const res = await app.request(path, {
          headers: { authorization: "Bearer s3cret-token-value-0123456789abcdef" }
        })
        expect(res.status, path).toBe(403)
        expect(await errorOf(res)).toBe("Forbidden")
      }
      const retry = await app.request("/admin/outbox/failed/retry", {
        method: "POST",
        body: JSON.stringify({ all: true })
      })
      expect(retry.status).toBe(403)
      // Probes and metrics stay open.
      expect((await app.request("/admin/health")).status).toBe(200)
      expect((await app.request("/admin/ready")).status).toBe(200)
      expect((await app.request("/admin/metrics")).status).toBe(200)
    } finally {
      await rt.dispose()
    }
  })

  it("with a token: 401 without it, 401 with a wrong one or scheme, through with the right one", async () => {
    const rt = await Runtime.make(MemorySagaStore.layer)
    try {
      const app = new Hono()
      app.route("/sagas", Routes.sagas(rt, { auth: token }))
      const none = await app.request(missingSaga)
      expect(none.status).toBe(401)
      expect(none.headers.get("www-authenticate")).toContain("Bearer")
      expect(await errorOf(none)).toBe("Unauthorized")
      for (
        const header of [
          "Bearer wrong",
          "Bearer s3cret-token-value-0123456789abcde",
          "Bearer s3cret-token-value-0123456789abcdef2",
          "Basic s3cret-token-value-0123456789abcdef",
          "s3cret-token-value-0123456789abcdef",
          "Bearer "
        ]
      ) {
        const res = await app.request(missingSaga, { headers: { authorization: header } })
        expect(res.status, header).toBe(401)
      }
      const ok = await app.request(missingSaga, {
        headers: { authorization: "Bearer s3cret-token-value-0123456789abcdef" }
      })
      expect(ok.status).toBe(404) // through the guard, to the view: the saga does not exist
      expect(await errorOf(ok)).toBe("NotFound")
      const lower = await app.request(missingSaga, {
        headers: { authorization: "bearer s3cret-token-value-0123456789abcdef" }
      })
      expect(lower.status).toBe(404)
    } finally {
      await rt.dispose()
    }
  })

  it("with a custom middleware: it decides", async () => {
    const rt = await Runtime.make(MemorySagaStore.layer)
    try {
      const seen: Array<string> = []
      const onlyOps: MiddlewareHandler = async (c, next) => {
        seen.push(c.req.path)
        if (c.req.header("x-role") !== "ops") return c.json({ error: { tag: "Forbidden", message: "ops only" } }, 403)
        await next()
      }
      const app = new Hono()
      app.route("/admin", Routes.all(rt, { auth: onlyOps }))
      expect((await app.request("/admin" + missingSaga)).status).toBe(403)
      expect((await app.request("/admin" + missingSaga, { headers: { "x-role": "ops" } })).status).toBe(404)
      expect((await app.request("/admin/outbox/stats", { headers: { "x-role": "ops" } })).status).toBe(501) // no OutboxStore in this app
      expect(seen).toEqual(["/admin" + missingSaga, "/admin" + missingSaga, "/admin/outbox/stats"])
    } finally {
      await rt.dispose()
    }
  })

  it("a token shorter than 32 characters (or empty, or with spaces) is a configuration error, at construction", async () => {
    for (const weak of ["", "   ", "x", "a".repeat(31), `${"a".repeat(20)} ${"b".repeat(20)}`]) {
      expect(() => Auth.bearer(Redacted.make(weak)), JSON.stringify(weak)).toThrow(InvalidConfig)
    }
    try {
      Auth.bearer(Redacted.make("short"))
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidConfig)
      expect((error as InvalidConfig).path).toBe("auth")
      expect((error as InvalidConfig).message).toContain("at least 32 characters")
      expect((error as InvalidConfig).message).not.toContain("short")
    }
    // The routes build their guard at once: a weak token fails the app's construction, not a request.
    const rt = await Runtime.make(MemorySagaStore.layer)
    try {
      expect(() => Routes.all(rt, { auth: Redacted.make("admin") })).toThrow(InvalidConfig)
      expect(() => Routes.sagas(rt, { auth: Redacted.make("admin") })).toThrow(InvalidConfig)
      expect(Auth.bearer(Redacted.make("a".repeat(32)))).toBeTypeOf("function")
    } finally {
      await rt.dispose()
    }
  })

  it("metrics take an optional guard", async () => {
    const rt = await Runtime.make(MemorySagaStore.layer)
    try {
      const app = new Hono()
      app.route("/", Routes.metrics(rt, { auth: token }))
      expect((await app.request("/metrics")).status).toBe(401)
      expect(
        (await app.request("/metrics", { headers: { authorization: "Bearer s3cret-token-value-0123456789abcdef" } }))
          .status
      ).toBe(200)
    } finally {
      await rt.dispose()
    }
  })

  it("the constant-time comparison is a correct equality", async () => {
    expect(await equal("abc", "abc")).toBe(true)
    expect(await equal("abc", "abd")).toBe(false)
    expect(await equal("abc", "abcd")).toBe(false)
    expect(await equal("", "")).toBe(true)
    expect(await equal("ü", "u")).toBe(false)
  })
})
