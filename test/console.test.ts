/**
 * The operator console in a real browser (Debian's chromium, headless, through playwright-core) on
 * the orders example (a child process on the test PostgreSQL with the in-memory broker): the page
 * asks for the token, shows the outbox counts, throughput, relays and consumers, retries a failed
 * event from the page and sees it published, shows a saga's timeline, keeps the token out of
 * cookies, and saves a screenshot (docs/console.png, which the README shows: written when missing or
 * with TIDINGS_UPDATE_SCREENSHOTS=1, so that a test run leaves the work tree as it was).
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { BrowserContext, Page } from "playwright-core"
import * as Domain from "../examples/orders/domain.ts"
import { launch } from "./support/chromium.ts"
import { pgClientLayer, pgUrl, schemaName } from "./support/pg.ts"
import { currentRuntime, spawnOn, stopChild, waitForOutput } from "./support/processes.ts"

const script = path.join(import.meta.dirname, "../examples/orders/main.ts")
const docs = path.join(import.meta.dirname, "../docs")
const runtime = currentRuntime()
const token = `console-test-${crypto.randomUUID()}`

const request = async (base: string, method: string, route: string, body?: unknown) => {
  const res = await fetch(`${base}${route}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" })
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  const text = await res.text()
  return { status: res.status, json: text === "" ? undefined : JSON.parse(text) as any }
}

/** Saves a screenshot where the README expects it, without dirtying the work tree on every run. */
const saveScreenshot = (png: Buffer, name: string) => {
  assert.isTrue(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), "a PNG")
  assert.isAbove(png.length, 10_000)
  const file = path.join(docs, name)
  const target = !fs.existsSync(file) || process.env["TIDINGS_UPDATE_SCREENSHOTS"] === "1"
    ? file
    : path.join(os.tmpdir(), `tidings-${process.pid}-${name}`)
  fs.mkdirSync(path.dirname(target), { recursive: true })
  fs.writeFileSync(target, png)
  if (target !== file) fs.rmSync(target)
}

describe(`the operator console in Chromium, on the orders example (${runtime})`, () => {
  const schema = schemaName("console")
  let child: ReturnType<typeof spawnOn>
  let base: string
  let context: BrowserContext
  let closeBrowser: () => Promise<void>
  let page: Page

  beforeAll(async () => {
    child = spawnOn(runtime, script, ["--serve"], {
      TIDINGS_PG_URL: pgUrl(),
      TIDINGS_AMQP_URL: "",
      TIDINGS_SCHEMA: schema,
      TIDINGS_ADMIN_TOKEN: token,
      TIDINGS_HTTP_PORT: "0",
      TIDINGS_LOG_LEVEL: "Error"
    })
    await waitForOutput(child, "serving; Ctrl-C stops")
    base = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(child.output())![1]!
    ;({ close: closeBrowser, context } = await launch())
    page = await context.newPage()
  })

  afterAll(async () => {
    await closeBrowser?.()
    if (child !== undefined) await stopChild(child)
    await Effect.runPromise(
      SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(
        Effect.provide(pgClientLayer(pgUrl(), 1)),
        Effect.ignore
      )
    )
  })

  const card = (label: string) => page.locator(`[data-card="${label}"] .value`)

  it("asks for the token, then shows the counts, throughput, relays and consumers", async () => {
    // Orders whose sagas run through the relay and the consumers; one order's confirmation is refused by the broker.
    const run = crypto.randomUUID().slice(0, 8)
    assert.strictEqual(
      (await request(base, "POST", "/admin/faults/publish", { type: "order.confirmed", aggregateId: `${run}-2` }))
        .status,
      201
    )
    for (const [n, customer] of [[1, "ada"], [2, "grace"], [3, "linus"]] as const) {
      const placed = await request(base, "POST", "/orders", {
        orderId: `${run}-${n}`,
        customer,
        sku: "book",
        quantity: 1,
        amountCents: 1_299
      })
      assert.strictEqual(placed.status, 202)
    }

    await page.goto(`${base}/admin/console`)
    const login = page.locator("dialog#login")
    await login.waitFor({ state: "visible" })
    await page.fill("#token", "wrong-token-0123456789abcdef-0123456789")
    await page.click("#login-form button[type=submit]")
    await page.locator("#login-error").filter({ hasText: "refused" }).waitFor()
    await page.fill("#token", token)
    await page.click("#login-form button[type=submit]")
    await login.waitFor({ state: "hidden" })

    // The page refreshes by itself until the refused event shows as failed.
    await page.locator("[data-card=\"Failed\"].bad").waitFor({ timeout: 30_000 })
    assert.strictEqual(await card("Failed").textContent(), "1")
    assert.isAbove(Number((await card("Published").textContent())!.replace(/,/g, "")), 5)
    assert.match((await card("Relay lag").textContent())!, /^(—|\d)/)
    assert.include(await page.locator("[data-panel=\"throughput\"] h2").textContent(), "Published per minute")
    assert.isAbove(await page.locator("[data-panel=\"throughput\"] rect.bar").count(), 10)
    const components = await page.locator("[data-panel=\"components\"] tbody tr").allTextContents()
    assert.deepStrictEqual(components.map((row) => row.replace(/answered in.*$/, "").trim()), [
      "postgresup",
      "brokerup",
      "relayup"
    ])
    assert.include(await page.locator("[data-panel=\"relays\"]").textContent(), "running")
    const consumers = await page.locator("[data-panel=\"consumers\"] tbody tr td:first-child").allTextContents()
    assert.includeMembers(consumers, Object.values(Domain.consumers))
    // The failed badge on the Outbox tab.
    assert.strictEqual(await page.locator("nav a[href=\"#outbox\"] .count").textContent(), "1")
    saveScreenshot(await page.screenshot({ fullPage: true }), "console.png")
  })

  it("retries the failed event from the page and sees it published", async () => {
    await page.click("nav a[href=\"#outbox\"]")
    const row = page.locator("[data-panel=\"events\"] tbody tr.clickable").filter({ hasText: "order.confirmed" })
    await row.waitFor()
    const id = await row.getAttribute("data-id")
    assert.match(id ?? "", /^[0-9a-f-]{36}$/)
    // Its details: payload, headers and the last error (the only one the outbox keeps).
    await row.click()
    const details = page.locator("[data-panel=\"events\"] tr.details")
    await details.waitFor()
    assert.include(await details.textContent(), "refused by the fault switch")
    assert.include(await details.textContent(), "traceparent")
    assert.include(await details.textContent(), "keeps the error of the last attempt only")
    assert.include(await page.locator("[data-panel=\"failed-by-type\"]").textContent(), "order.confirmed")

    await row.locator("button[data-action=\"retry\"]").click()
    await page.locator("#toast").filter({ hasText: "Retried 1 event" }).waitFor()
    await page.selectOption("#outbox-status", "published")
    await page.locator(`[data-panel="events"] tr[data-id="${id}"] .badge.published`).waitFor({ timeout: 30_000 })
    assert.strictEqual((await request(base, "GET", `/admin/console/api/outbox/events/${id}`)).json.status, "published")
    await page.click("nav a[href=\"#overview\"]")
    await page.locator("[data-card=\"Failed\"]:not(.bad)").waitFor({ timeout: 30_000 })
    assert.strictEqual(await card("Failed").textContent(), "0")
  })

  it("shows sagas with filters and a timeline per saga", async () => {
    await page.click("nav a[href=\"#sagas\"]")
    await page.selectOption("#saga-status", "completed")
    const first = page.locator("[data-panel=\"saga-list\"] tbody tr.clickable").first()
    await first.waitFor()
    assert.include(await first.textContent(), "place-order")
    await first.click()
    const detail = page.locator("[data-panel=\"saga-detail\"]")
    await detail.waitFor()
    assert.strictEqual(await detail.locator("svg.timeline rect").count(), 2)
    assert.include(await detail.textContent(), "reserve-inventory")
    assert.include(await detail.textContent(), "charge-payment")
    // A completed saga offers neither retry nor compensate.
    assert.strictEqual(await detail.locator("button").count(), 0)
    saveScreenshot(await page.screenshot({ fullPage: true }), "console-saga.png")
  })

  it("keeps the token in session storage, never in a cookie; signing out forgets it", async () => {
    assert.strictEqual(await page.evaluate(() => sessionStorage.getItem("tidings.console.token")), token)
    assert.deepStrictEqual(await context.cookies(), [])
    await page.click("#signout")
    await page.locator("dialog#login").waitFor({ state: "visible" })
    assert.isNull(await page.evaluate(() => sessionStorage.getItem("tidings.console.token")))
  })
})
