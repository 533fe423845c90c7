/**
 * The orders example (`examples/orders`) end to end, as a real child process on the runtime the suite
 * runs on (Node in the Node run, Deno in the Deno run), over HTTP, against the test PostgreSQL (a
 * fresh schema per service) with the in-memory broker and with RabbitMQ: orders, sagas that complete
 * and compensate, the order-list projection, the admin routes (refused without the token; a failed
 * outbox event retried and published), `/metrics` parsed as Prometheus text, a clean SIGTERM. Then
 * the demo command itself, on its embedded defaults and on RabbitMQ, and its settings errors.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Domain from "../examples/orders/domain.ts"
import * as Settings from "../examples/orders/settings.ts"
import * as Transport from "../examples/orders/transport.ts"
import { amqpUrl, rawChannel } from "../packages/rabbitmq/test/helpers.ts"
import { pgClientLayer, pgUrl, schemaName } from "./support/pg.ts"
import {
  currentRuntime,
  defaultStallMs,
  exited,
  spawnOn,
  stopChild,
  waitForOutput,
  watchProgress
} from "./support/processes.ts"
import { waitFor } from "./support/progress.ts"
import * as Prometheus from "./support/prometheus.ts"
import { send } from "./support/rawHttp.ts"

const script = path.join(import.meta.dirname, "../examples/orders/main.ts")
const runtime = currentRuntime()
const token = `test-token-${crypto.randomUUID()}`

interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  readonly json: any
}

const request = async (
  base: string,
  method: string,
  route: string,
  options: { readonly body?: unknown; readonly token?: string } = {}
): Promise<Reply> => {
  const headers: Record<string, string> = {}
  if (options.body !== undefined) headers["content-type"] = "application/json"
  if (options.token !== undefined) headers["authorization"] = `Bearer ${options.token}`
  const response = await fetch(`${base}${route}`, {
    method,
    headers,
    ...(options.body === undefined
      ? {}
      : { body: typeof options.body === "string" ? options.body : JSON.stringify(options.body) }),
    signal: AbortSignal.timeout(15_000)
  })
  const text = await response.text()
  let json: unknown
  try {
    json = text === "" ? undefined : JSON.parse(text)
  } catch {
    json = undefined
  }
  return { status: response.status, headers: response.headers, text, json }
}

/**
 * Polls `read` until `done` holds; fails with the last value when the value stops changing for
 * `stallMs` (no cap on the total time: a loaded machine is slower, not failing).
 */
const until = <A>(what: string, read: () => Promise<A>, done: (a: A) => boolean, stallMs = 30_000): Promise<A> =>
  waitFor({ what, read, done, stallMs })

const dropSchema = (schema: string) =>
  Effect.runPromise(
    SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(
      Effect.provide(pgClientLayer(pgUrl(), 1)),
      Effect.ignore
    )
  )

const deleteRabbitEntities = (prefix: string) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const channel = yield* rawChannel()
    const names = Transport.rabbitmqNames(prefix, Object.values(Domain.consumers))
    yield* Effect.promise(async () => {
      for (const q of names.queues) await channel.deleteQueue(q).catch(() => undefined)
      for (const e of names.exchanges) await channel.deleteExchange(e).catch(() => undefined)
    })
  })))

type Broker = "memory" | "rabbitmq"

/** The service in serve mode, as a child process, with its own schema. */
const startService = async (broker: Broker) => {
  const schema = schemaName("orders")
  const child = spawnOn(runtime, script, ["--serve"], {
    TIDINGS_PG_URL: pgUrl(),
    TIDINGS_AMQP_URL: broker === "rabbitmq" ? amqpUrl() : "",
    TIDINGS_SCHEMA: schema,
    TIDINGS_ADMIN_TOKEN: token,
    TIDINGS_HTTP_PORT: "0",
    TIDINGS_LOG_LEVEL: "Error"
  })
  try {
    await waitForOutput(child, "serving; Ctrl-C stops")
  } catch (error) {
    child.kill("SIGKILL")
    throw error
  }
  const url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(child.output())?.[1]
  if (url === undefined) throw new Error(`no URL in the output:\n${child.output()}`)
  return { child, url, schema }
}

const serviceSuite = (broker: Broker) =>
  describe(`examples/orders over HTTP on ${runtime} with the ${broker} broker`, () => {
    let service: Awaited<ReturnType<typeof startService>>
    const http = (method: string, route: string, options: { readonly body?: unknown; readonly token?: string } = {}) =>
      request(service.url, method, route, options)
    const run = `r${Date.now().toString(36)}${Math.random().toString(36).slice(2, 5)}`
    const id = (n: number) => `${run}-${n}`
    const order = async (orderId: string) => {
      const res = await http("GET", `/orders/${orderId}`)
      assert.strictEqual(res.status, 200, res.text)
      return res.json as {
        order: Record<string, any>
        saga: { id: string; status: string; error: string | null; steps: Array<{ name: string; status: string }> }
      }
    }
    const settled = (orderId: string) =>
      until(`order ${orderId} to settle`, () => order(orderId), (o) => o.order["status"] !== "pending")
    const listed = (customer: string) =>
      http("GET", `/orders?customer=${customer}`).then((r) =>
        (r.json.orders as Array<Record<string, any>>).filter((o) => String(o["order_id"]).startsWith(run))
      )

    beforeAll(async () => {
      service = await startService(broker)
    })

    afterAll(async () => {
      if (service === undefined) return
      await stopChild(service.child)
      await dropSchema(service.schema)
      if (broker === "rabbitmq") await deleteRabbitEntities(`tidings.${service.schema}`)
    })

    it("places orders; the sagas complete, or compensate when the payment fails or the stock is short", async () => {
      const place = (n: number, customer: string, sku: string, quantity: number, amountCents: number) =>
        http("POST", "/orders", { body: { orderId: id(n), customer, sku, quantity, amountCents } })
      const ada = await place(1, "ada", "book", 2, 2_598)
      assert.strictEqual(ada.status, 202, ada.text)
      assert.strictEqual(ada.headers.get("location"), `/orders/${id(1)}`)
      assert.strictEqual(ada.json.order.status, "pending")
      assert.match(ada.json.order.saga_id, /^[0-9a-f-]{36}$/)
      for (
        const [n, customer, sku, quantity, cents] of [[2, "mallory", "lamp", 1, 8_900], [3, "grace", "mug", 1, 1_250], [
          4,
          "linus",
          "lamp",
          50,
          44_500
        ]] as const
      ) {
        const res = await place(n, customer, sku, quantity, cents)
        assert.strictEqual(res.status, 202, res.text)
      }
      const [a, m, g, l] = await Promise.all([settled(id(1)), settled(id(2)), settled(id(3)), settled(id(4))])
      assert.strictEqual(a!.order["status"], "confirmed")
      assert.strictEqual(a!.saga.status, "completed")
      assert.deepStrictEqual(a!.saga.steps.map((s) => s.status), ["completed", "completed"])
      // the declined card: the reserved lamp was released by the compensation
      assert.strictEqual(m!.order["status"], "cancelled")
      assert.strictEqual(m!.saga.status, "compensated")
      assert.deepStrictEqual(m!.saga.steps.map((s) => `${s.name}=${s.status}`), [
        "reserve-inventory=compensated",
        "charge-payment=failed"
      ])
      assert.match(m!.order["reason"], /payment declined/)
      // the flaky gateway: the first delivery failed, the redelivery charged
      assert.strictEqual(g!.order["status"], "confirmed")
      assert.strictEqual(l!.saga.status, "compensated")
      assert.match(l!.saga.error ?? "", /out of stock/)
      // the admin saga view (guarded) shows the same execution
      const view = await http("GET", `/admin/sagas/${m!.saga.id}`, { token })
      assert.strictEqual(view.status, 200, view.text)
      assert.strictEqual(view.json.saga.status, "compensated")
      assert.strictEqual(view.json.saga.type, "place-order")
      assert.deepStrictEqual(view.json.steps.map((s: { status: string }) => s.status), ["compensated", "failed"])
      const stock = await http("GET", "/stock")
      assert.deepStrictEqual(stock.json.stock, [{ sku: "book", available: 98 }, { sku: "lamp", available: 5 }, {
        sku: "mug",
        available: 49
      }])
    })

    it("keeps the order list (the projection) in step with the orders, per customer", async () => {
      const rows = await until(
        "the projection to apply every outcome",
        () =>
          http("GET", "/orders").then((r) =>
            (r.json.orders as Array<Record<string, any>>).filter((o) => String(o["order_id"]).startsWith(run))
          ),
        (rows) => rows.length === 4 && rows.every((r) => r["status"] !== "pending")
      )
      assert.deepStrictEqual(rows.map((r) => [r["order_id"], r["customer"], r["status"], r["version"]]), [
        [id(1), "ada", "confirmed", 2],
        [id(2), "mallory", "cancelled", 2],
        [id(3), "grace", "confirmed", 2],
        [id(4), "linus", "cancelled", 2]
      ])
      assert.deepStrictEqual((await listed("mallory")).map((r) => r["order_id"]), [id(2)])
      assert.match(String((await listed("mallory"))[0]!["reason"]), /payment declined/)
    })

    it("answers bad input with typed errors: 400 with issues, 404, 409, and 200 for a safe retry", async () => {
      const bad = await http("POST", "/orders", { body: { customer: "", sku: "book", quantity: 0, amountCents: 1.5 } })
      assert.strictEqual(bad.status, 400, bad.text)
      assert.strictEqual(bad.json.error.tag, "BadRequest")
      const paths = (bad.json.error.issues as Array<{ path: Array<string> }>).map((i) => i.path.join("."))
      assert.includeMembers(paths, ["body.customer", "body.quantity", "body.amountCents"])
      const notJson = await http("POST", "/orders", { body: "{nope" })
      assert.strictEqual(notJson.status, 400)
      const missing = await http("GET", `/orders/${run}-nope`)
      assert.strictEqual(missing.status, 404)
      assert.strictEqual(missing.json.error.tag, "OrderNotFound")
      const same = await http("POST", "/orders", {
        body: { orderId: id(1), customer: "ada", sku: "book", quantity: 2, amountCents: 2_598 }
      })
      assert.strictEqual(same.status, 200, same.text)
      assert.isFalse(same.json.created)
      const conflict = await http("POST", "/orders", {
        body: { orderId: id(1), customer: "ada", sku: "book", quantity: 3, amountCents: 2_598 }
      })
      assert.strictEqual(conflict.status, 409, conflict.text)
      assert.strictEqual(conflict.json.error.tag, "OrderIdConflict")
    })

    it("refuses the admin routes without the token or with a wrong one; health and readiness are open", async () => {
      for (
        const [method, route] of [
          ["GET", "/admin/outbox/failed"],
          ["GET", "/admin/outbox/stats"],
          ["GET", "/admin/inbox"],
          ["POST", "/admin/faults/publish"],
          ["GET", "/admin/broker"]
        ] as const
      ) {
        const anonymous = await http(method, route, method === "POST" ? { body: { type: "x" } } : {})
        assert.strictEqual(anonymous.status, 401, `${method} ${route}: ${anonymous.text}`)
        assert.strictEqual(anonymous.json.error.tag, "Unauthorized")
        const wrong = await http(method, route, {
          token: "not-the-token",
          ...(method === "POST" ? { body: { type: "x" } } : {})
        })
        assert.strictEqual(wrong.status, 401, `${method} ${route} with a wrong token`)
      }
      const sagaId = (await order(id(1))).saga.id
      assert.strictEqual((await http("GET", `/admin/sagas/${sagaId}`)).status, 401)
      assert.strictEqual((await http("GET", "/admin/sagas/not-a-uuid", { token })).status, 400)
      const view = await http("GET", "/admin/broker", { token })
      assert.strictEqual(view.status, 200, view.text)
      assert.strictEqual(view.json.kind, broker)
      assert.strictEqual((await http("GET", "/health")).status, 200)
      const ready = await http("GET", "/ready")
      assert.strictEqual(ready.status, 200, ready.text)
      assert.deepStrictEqual(
        ready.json.checks.map((c: { name: string; status: string }) => `${c.name}=${c.status}`).sort(),
        ["broker=up", "postgres=up", "relay=up"]
      )
    })

    it("has safe HTTP defaults: 413 before reading a huge body, 415, 400 without an error log, 404/405, /ready details with the token", async () => {
      const port = Number(new URL(service.url).port)
      const MB = 1024 * 1024
      for (const chunked of [false, true]) {
        const reply = await send(port, {
          target: "/orders",
          headers: { "content-type": "application/json" },
          size: 200 * MB,
          chunked,
          // 8 of the 200 MB, then wait: only a server that refuses while streaming answers.
          pauseAfter: 8 * MB
        })
        assert.strictEqual(reply.status, 413, `chunked=${chunked}: ${reply.body}`)
        assert.strictEqual(reply.json.error.tag, "PayloadTooLarge")
      }
      // 10 MB of nested [ while /health is probed: refused at the limit, /health keeps answering.
      let uploading = true
      let healthy = 0
      const upload = send(port, {
        target: "/orders",
        headers: { "content-type": "application/json" },
        size: 10 * MB,
        fill: "[",
        chunked: true,
        pauseAfter: 4 * MB
      }).finally(() => void (uploading = false))
      const probes = (async () => {
        do if ((await http("GET", "/health")).status === 200) healthy++
        while (uploading)
      })()
      const [nested] = await Promise.all([upload, probes])
      assert.strictEqual(nested.status, 413)
      assert.isAbove(healthy, 0)

      // A cross-site form post of a valid order: 415, nothing placed.
      const formId = id(90)
      const form = await fetch(`${service.url}/orders`, {
        method: "POST",
        headers: { "content-type": "text/plain" },
        body: JSON.stringify({ orderId: formId, customer: "eve", sku: "book", quantity: 1, amountCents: 100 })
      })
      assert.strictEqual(form.status, 415)
      assert.strictEqual(((await form.json()) as { error: { tag: string } }).error.tag, "UnsupportedMediaType")
      assert.strictEqual((await http("GET", `/orders/${formId}`)).status, 404)

      // NUL bytes and invalid UTF-8 in paths and queries: 400, and nothing in the service's log.
      const logBefore = service.child.output().length
      for (
        const target of [
          "/orders/%00",
          "/orders/a%00",
          "/orders?customer=%00",
          "/orders/%ff",
          "/orders?customer=%c3%28",
          "/stock?x=%"
        ]
      ) {
        const reply = await send(port, { method: "GET", target })
        assert.strictEqual(reply.status, 400, target)
        assert.strictEqual(reply.json.error.tag, "BadRequest", target)
      }
      // Nothing about these requests in the log (other tests' sagas may log meanwhile).
      assert.notMatch(
        service.child.output().slice(logBefore),
        /request failed|defect|SqlError|invalid byte sequence|\\u0000|%00/i,
        "no error log"
      )

      // Unknown routes and methods, in the JSON error shape.
      const missing = await http("GET", "/nothing")
      assert.strictEqual(missing.status, 404)
      assert.deepStrictEqual(missing.json, { error: { tag: "NotFound", message: "no route for GET /nothing" } })
      const wrong = await http("DELETE", "/orders")
      assert.strictEqual(wrong.status, 405)
      assert.strictEqual(wrong.headers.get("allow"), "GET, HEAD, POST")
      assert.strictEqual(wrong.json.error.tag, "MethodNotAllowed")

      // /ready: names and states for anyone; durations (and reasons, when down) with the token.
      const ready = await http("GET", "/ready")
      assert.strictEqual(ready.status, 200)
      for (const check of ready.json.checks) assert.deepStrictEqual(Object.keys(check).sort(), ["name", "status"])
      const detailed = await http("GET", "/ready", { token })
      for (const check of detailed.json.checks) assert.isNumber(check.durationMs)
    })

    it("shows a failed outbox event in the admin view, and a retry through the admin route publishes it", async () => {
      const target = id(5)
      const armed = await http("POST", "/admin/faults/publish", {
        token,
        body: { type: "order.confirmed", aggregateId: target }
      })
      assert.strictEqual(armed.status, 201, armed.text)
      const placed = await http("POST", "/orders", {
        body: { orderId: target, customer: "bob", sku: "book", quantity: 1, amountCents: 1_999 }
      })
      assert.strictEqual(placed.status, 202, placed.text)
      const failed = await until("the refused event in GET /admin/outbox/failed", async () => {
        const res = await http("GET", "/admin/outbox/failed", { token })
        assert.strictEqual(res.status, 200, res.text)
        return (res.json.events as Array<Record<string, any>>).find((e) => e["aggregateId"] === target)
      }, (e) => e !== undefined)
      assert.strictEqual(failed!["type"], "order.confirmed")
      assert.match(failed!["lastError"], /fault switch/)
      const stats = await http("GET", "/admin/outbox/stats", { token })
      assert.isAtLeast(stats.json.failed, 1)
      // the saga is done, the order confirmed on the write side; the read side has not heard of it
      assert.strictEqual((await order(target)).order["status"], "confirmed")
      assert.deepStrictEqual((await listed("bob")).map((r) => r["status"]), ["pending"])
      assert.strictEqual(
        (await http("POST", "/admin/outbox/failed/retry", { token, body: { ids: ["not-a-uuid"] } })).status,
        400
      )
      const retried = await http("POST", `/admin/outbox/failed/${failed!["id"]}/retry`, { token })
      assert.strictEqual(retried.status, 200, retried.text)
      assert.deepStrictEqual(retried.json, { retried: 1 })
      assert.strictEqual(
        (await http("POST", `/admin/outbox/failed/${failed!["id"]}/retry`, { token })).status,
        404,
        "no longer failed"
      )
      await until(
        "the retried event to reach the projection",
        () => listed("bob").then((rows) => rows.map((r) => r["status"])),
        (s) => s[0] === "confirmed"
      )
      const after = await http("GET", "/admin/outbox/failed", { token })
      assert.isUndefined((after.json.events as Array<Record<string, any>>).find((e) => e["id"] === failed!["id"]))
      const inbox = await http("GET", `/admin/inbox/${Domain.consumers.projection}/${failed!["id"]}`, { token })
      assert.strictEqual(inbox.status, 200, inbox.text)
      assert.strictEqual(inbox.json.status, "processed")
    })

    it("serves /metrics as Prometheus text with the outbox, saga, inbox and consumer metrics", async () => {
      const res = await http("GET", "/metrics")
      assert.strictEqual(res.status, 200)
      assert.match(res.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/)
      const scrape = Prometheus.parse(res.text)
      assert.strictEqual(scrape.types.get("tidings_outbox_published_total"), "counter")
      assert.isAbove(scrape.sum("tidings_outbox_published_total"), 20)
      assert.isAtLeast(scrape.sum("tidings_saga_started_total"), 5)
      assert.isAtLeast(scrape.sum("tidings_saga_finished_total", { status: "completed" }), 3)
      assert.isAtLeast(scrape.sum("tidings_saga_finished_total", { status: "compensated" }), 2)
      assert.isAbove(
        scrape.sum("tidings_inbox_handled_total", { consumer: Domain.consumers.inventory, outcome: "processed" }),
        0
      )
      assert.isAbove(
        scrape.sum("tidings_inbox_handled_total", { consumer: Domain.consumers.payment, outcome: "failed" }),
        0,
        "the flaky gateway's first attempt"
      )
      assert.isAbove(scrape.sum("tidings_consumer_acked_total", { consumer: Domain.consumers.payment }), 0)
      assert.isAtLeast(scrape.sum("tidings_consumer_retried_total", { consumer: Domain.consumers.payment }), 1)
      assert.isAtLeast(scrape.sum("tidings_outbox_failed_total"), 1)
      // a histogram: cumulative buckets ending in +Inf, equal to _count
      assert.strictEqual(scrape.types.get("tidings_outbox_publish_latency_seconds"), "histogram")
      const buckets = scrape.find("tidings_outbox_publish_latency_seconds_bucket")
      const count = scrape.sum("tidings_outbox_publish_latency_seconds_count")
      assert.isAbove(count, 0)
      assert.strictEqual(buckets.find((b) => b.labels["le"] === "+Inf")?.value, count)
      const values = buckets.map((b) => b.value)
      assert.deepStrictEqual(values, [...values].sort((x, y) => x - y), "cumulative")
    })

    it("stops cleanly on SIGTERM", async () => {
      const code = await stopChild(service.child)
      const lines = service.child.output().trim().split("\n")
      assert.include(lines, "[orders] stopping")
      // Printed after the HTTP server, the runtime and the database pool were closed.
      assert.strictEqual(lines.at(-1), "[orders] stopped", service.child.output())
      // Deno's node:child_process reports a child that handled SIGTERM and exited 0 as killed by
      // SIGTERM; Node reports the real exit code.
      assert.strictEqual(code, runtime === "deno" ? "SIGTERM" : 0, service.child.output())
    })
  })

serviceSuite("memory")
serviceSuite("rabbitmq")

describe(`the demo command on ${runtime}`, () => {
  it("is the root package's tidings:demo script", () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(import.meta.dirname, "../package.json"), "utf8")) as {
      scripts: Record<string, string>
    }
    assert.strictEqual(pkg.scripts["tidings:demo"], "node examples/orders/main.ts")
  })

  // A demo that stops making progress (no output, no CPU) is killed; a slow one is waited for.
  const runDemo = async (env: Record<string, string>) => {
    const child = spawnOn(runtime, script, [], env)
    const stopWatching = watchProgress(child, defaultStallMs, () => child.kill("SIGKILL"))
    try {
      return { code: await exited(child), output: child.output() }
    } finally {
      stopWatching()
    }
  }

  const checkSummary = (output: string) => {
    const lines = output.split("\n").filter((l) => l.startsWith("[orders]")).map((l) => l.slice("[orders] ".length))
    const after = lines.slice(lines.indexOf("— summary —"))
    assert.isAbove(after.length, 10, output)
    const saga = (customer: string) =>
      after.find((l) => l.includes(` ${customer.padEnd(8)} `) && /completed|compensated/.test(l)) ?? ""
    assert.match(saga("ada"), /completed +reserve-inventory=completed, charge-payment=completed/)
    assert.match(saga("grace"), /completed/)
    assert.match(
      saga("mallory"),
      /compensated +reserve-inventory=compensated, charge-payment=failed — .*payment declined/
    )
    assert.match(saga("linus"), /compensated .*out of stock/)
    assert.match(saga("bob"), /completed/)
    assert.match(after.find((l) => l.startsWith("events (outbox):")) ?? "", /^events \(outbox\): \d+ in all$/)
    assert.match(after.find((l) => l.trim().startsWith("inventory.release")) ?? "", /1 published/)
    assert.match(after.find((l) => l.trim().startsWith("order.confirmed")) ?? "", /3 published/)
    assert.strictEqual(
      after.filter((l) => / (confirmed|cancelled)( \(.*\))?$/.test(l) && /^ {2}o/.test(l)).length,
      5,
      "five rows in the order list"
    )
    assert.include(after.join("\n"), "stock: book 97, lamp 5, mug 49")
    assert.match(
      after.find((l) => l.startsWith("metrics (GET /metrics):")) ?? "",
      /tidings_saga_finished_total\{status="compensated"\} 2/
    )
    assert.match(lines.find((l) => l.startsWith("GET /admin/outbox/failed without a token")) ?? "", /→ 401$/)
    assert.match(lines.at(-1) ?? "", /^done in [\d.]+ s: 5 orders, 3 confirmed, 2 cancelled by compensation/)
    return lines
  }

  it("runs on the embedded defaults (embedded PostgreSQL, in-memory broker), shows progress and a summary, exits 0", async () => {
    const started = Date.now()
    const { code, output } = await runDemo({
      TIDINGS_PG_URL: "",
      TIDINGS_AMQP_URL: "",
      TIDINGS_SCHEMA: "",
      TIDINGS_ADMIN_TOKEN: "",
      TIDINGS_HTTP_PORT: ""
    })
    assert.strictEqual(code, 0, output)
    const lines = checkSummary(output)
    assert.match(lines[1] ?? "", /^PostgreSQL ready in \d+ ms \(embedded, 127\.0\.0\.1:\d+/)
    assert.match(lines.find((l) => l.startsWith("broker:")) ?? "", /^broker: in-memory/)
    assert.match(lines.find((l) => l.startsWith("listening on")) ?? "", /^listening on http:\/\/127\.0\.0\.1:\d+ /)
    // progress while the sagas run, before the summary
    const progress = lines.slice(0, lines.indexOf("— summary —"))
    assert.isTrue(progress.some((l) => / saga (completed|compensat)/.test(l)), output)
    assert.isBelow(Date.now() - started, 120_000)
  })

  it("uses RabbitMQ when TIDINGS_AMQP_URL is set, and runs again on the same database", async () => {
    const schema = schemaName("ordersdemo")
    try {
      const { code, output } = await runDemo({
        TIDINGS_PG_URL: pgUrl(),
        TIDINGS_AMQP_URL: amqpUrl(),
        TIDINGS_SCHEMA: schema,
        TIDINGS_ADMIN_TOKEN: "",
        TIDINGS_HTTP_PORT: ""
      })
      assert.strictEqual(code, 0, output)
      const lines = checkSummary(output)
      assert.match(lines.find((l) => l.startsWith("broker:")) ?? "", /^broker: amqp:\/\/127\.0\.0\.1:\d+/)
      assert.notInclude(output, "guest:guest", "no credentials in the output")
      // Again, on the in-memory broker, over the first run's tables: restocked, new order ids.
      const again = await runDemo({
        TIDINGS_PG_URL: pgUrl(),
        TIDINGS_AMQP_URL: "",
        TIDINGS_SCHEMA: schema,
        TIDINGS_ADMIN_TOKEN: "",
        TIDINGS_HTTP_PORT: ""
      })
      assert.strictEqual(again.code, 0, again.output)
      assert.include(again.output, "stock: book 97, lamp 5, mug 49")
      assert.match(again.output, /done in [\d.]+ s: 5 orders, 3 confirmed, 2 cancelled by compensation/)
    } finally {
      await dropSchema(schema)
      await deleteRabbitEntities(`tidings.${schema}`)
    }
  })

  it("reads the components' TIDINGS_* variables in one go: one error naming every wrong variable, exit code 2", async () => {
    const load = (args: ReadonlyArray<string>, env: Record<string, string>) =>
      Effect.runPromise(
        Effect.result(Settings.load(args).pipe(Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))))
      )
    for (const [args, setting] of [[["--port", "99999"], "--port"], [["--bogus"], "--bogus"]] as const) {
      const r = await load(args, {})
      assert.isTrue(r._tag === "Failure" && r.failure._tag === "UsageError" && r.failure.setting === setting, setting)
    }
    const bad = await load([], {
      TIDINGS_SCHEMA: "Bad-Name",
      TIDINGS_PG_URL: "mysql://u:Pa55word@x",
      TIDINGS_AMQP_URL: "not a url",
      TIDINGS_ADMIN_TOKEN: "short",
      TIDINGS_LOG_LEVEL: "loud",
      TIDINGS_RELAY_CONCURRENCY: "four",
      TIDINGS_HTTP_PORT: "99999"
    })
    assert.strictEqual(bad._tag, "Failure")
    const error = bad._tag === "Failure" ? bad.failure : undefined
    assert.strictEqual(error?._tag, "InvalidConfig")
    assert.deepStrictEqual(error?._tag === "InvalidConfig" ? error.issues?.map((i) => i.path) : [], [
      "TIDINGS_PG_URL",
      "TIDINGS_AMQP_URL",
      "TIDINGS_SCHEMA",
      "TIDINGS_RELAY_CONCURRENCY",
      "TIDINGS_HTTP_PORT",
      "TIDINGS_ADMIN_TOKEN",
      "TIDINGS_LOG_LEVEL"
    ])
    assert.notInclude(error?.message ?? "", "Pa55word")
    const ok = await load(["--serve", "--port=8080"], {
      TIDINGS_PG_URL: "postgres://u:secret@h/db",
      TIDINGS_ADMIN_TOKEN: "long-enough-token-0123456789abcdef",
      TIDINGS_HTTP_PORT: "9090",
      TIDINGS_RELAY_CONCURRENCY: "3"
    })
    assert.strictEqual(ok._tag, "Success")
    if (ok._tag === "Success" && ok.success !== "help") {
      assert.isTrue(ok.success.serve)
      assert.strictEqual(ok.success.http.port, 8080, "--port wins over TIDINGS_HTTP_PORT")
      assert.strictEqual(ok.success.relay.concurrency, 3, "the variable wins over the demo's default")
      assert.strictEqual(ok.success.relay.maxAttempts, 5, "the demo's default")
      assert.strictEqual(ok.success.schema, "orders")
      assert.isFalse(ok.success.tokenGenerated)
      assert.notInclude(String(ok.success.pg?.url), "secret")
    }
    // and the process says so and exits 2, before starting anything
    const { code, output } = await runDemo({ TIDINGS_SCHEMA: "Bad-Name", TIDINGS_RELAY_LEASE: "soon" })
    assert.strictEqual(code, 2, output)
    assert.include(output, "invalid settings: TIDINGS_SCHEMA: must be 1-63 characters")
    assert.include(output, "TIDINGS_RELAY_LEASE: Expected a duration")
    assert.notInclude(output, "starting PostgreSQL")
  })
})
