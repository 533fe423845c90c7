/**
 * The Grafana dashboard (docs/grafana/tidings.json) reads only metrics that exist: every metric name
 * its PromQL queries use is a series the orders example's `/metrics` exposes, after a few orders.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as path from "node:path"
import { pgClientLayer, pgUrl, schemaName } from "./support/pg.ts"
import { currentRuntime, spawnOn, stopChild, waitForOutput } from "./support/processes.ts"
import * as Prometheus from "./support/prometheus.ts"
import { root } from "./support/runtimes.ts"

const dashboardFile = path.join(root, "docs/grafana/tidings.json")
const script = path.join(root, "examples/orders/main.ts")

/** Every PromQL expression of the dashboard: panel targets and variable queries. */
const expressions = (dashboard: any): Array<string> => {
  const out: Array<string> = []
  const walk = (panels: ReadonlyArray<any>) => {
    for (const panel of panels) {
      for (const target of panel.targets ?? []) if (typeof target.expr === "string") out.push(target.expr)
      walk(panel.panels ?? [])
    }
  }
  walk(dashboard.panels ?? [])
  for (const variable of dashboard.templating?.list ?? []) {
    const q = typeof variable.query === "string" ? variable.query : variable.query?.query
    if (variable.type === "query" && typeof q === "string") out.push(q)
  }
  return out
}

const keywords = new Set([
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "bool",
  "and",
  "or",
  "unless",
  "offset",
  "inf",
  "nan",
  // aggregation operators, which may be followed by `by (...)` rather than `(`
  "sum",
  "min",
  "max",
  "avg",
  "group",
  "stddev",
  "stdvar",
  "count",
  "count_values",
  "bottomk",
  "topk",
  "quantile"
])

/**
 * The metric names a PromQL expression selects: identifiers outside label matchers (`{...}`),
 * ranges (`[...]`), strings and `by (...)` / `without (...)` lists, that are not function calls or
 * keywords. `label_values(metric, label)` names its metric.
 */
const metricNames = (expr: string): Array<string> => {
  const names: Array<string> = []
  let i = 0
  let skipList = false
  while (i < expr.length) {
    const c = expr[i]!
    if (c === "\"" || c === "'" || c === "`") {
      const end = expr.indexOf(c, i + 1)
      i = end < 0 ? expr.length : end + 1
    } else if (c === "{" || c === "[") {
      const end = expr.indexOf(c === "{" ? "}" : "]", i)
      i = end < 0 ? expr.length : end + 1
    } else if (c === "(" && skipList) {
      i = expr.indexOf(")", i) + 1 || expr.length
      skipList = false
    } else if (/[0-9.]/.test(c)) {
      // a number or a duration (5m, 1.5e3)
      i += /^[0-9.]+(e[-+]?\d+)?[a-z]*/i.exec(expr.slice(i))![0].length
    } else if (/[a-zA-Z_:]/.test(c)) {
      const match = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(expr.slice(i))![0]
      i += match.length
      const rest = expr.slice(i).trimStart()
      if (["by", "without", "on", "ignoring", "group_left", "group_right"].includes(match)) skipList = true
      else if (keywords.has(match.toLowerCase()) || match.startsWith("$")) continue
      else if (rest.startsWith("(")) {
        // label_values(metric, label): the metric, and not the label.
        if (match === "label_values") {
          const inner = /^\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(rest)
          if (inner !== null) names.push(inner[1]!)
          i = expr.indexOf(")", i) + 1 || expr.length
        }
      } else names.push(match)
    } else i++
  }
  return names
}

describe("the Grafana dashboard", () => {
  const cleanups: Array<() => Promise<void>> = []
  afterAll(async () => {
    for (const f of cleanups.reverse()) await f()
  }, 60_000)

  it("the PromQL parser finds the metric names (and only them)", () => {
    assert.deepStrictEqual(
      metricNames(
        "histogram_quantile(0.95, sum by (le, consumer) (rate(tidings_consumer_handle_duration_seconds_bucket{job=~\"$job\"}[$__rate_interval])))"
      ),
      ["tidings_consumer_handle_duration_seconds_bucket"]
    )
    assert.deepStrictEqual(metricNames("sum(a_total) / ignoring(x) b_total offset 5m"), ["a_total", "b_total"])
    assert.deepStrictEqual(metricNames("max by (status) (c{job=~\"$job\"}) + topk(3, d)"), ["c", "d"])
    assert.deepStrictEqual(metricNames("label_values(tidings_outbox_published_total, job)"), [
      "tidings_outbox_published_total"
    ])
  })

  it("every query names a metric that the orders example's /metrics exposes", async () => {
    const dashboard = JSON.parse(fs.readFileSync(dashboardFile, "utf8"))
    assert.strictEqual(dashboard.uid, "tidings")
    const exprs = expressions(dashboard)
    assert.isAtLeast(exprs.length, 25)
    const wanted = new Set(exprs.flatMap(metricNames))
    for (const expr of exprs) assert.isNotEmpty(metricNames(expr), `a query without a metric: ${expr}`)

    const schema = schemaName("dashboard")
    const token = "dashboard-test-token-0123456789abcdef"
    const child = spawnOn(currentRuntime(), script, ["--serve"], {
      TIDINGS_PG_URL: pgUrl(),
      TIDINGS_AMQP_URL: "",
      TIDINGS_SCHEMA: schema,
      TIDINGS_ADMIN_TOKEN: token,
      TIDINGS_HTTP_PORT: "0",
      TIDINGS_LOG_LEVEL: "Error"
    })
    cleanups.push(async () => {
      await stopChild(child)
      await Effect.runPromise(
        SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(
          Effect.provide(pgClientLayer(pgUrl(), 1)),
          Effect.ignore
        )
      )
    })
    await waitForOutput(child, "serving; Ctrl-C stops", 60_000)
    const base = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(child.output())![1]!

    // Two orders: one confirmed, one compensated (the card of `mallory` is declined).
    const run = `d${Date.now().toString(36)}`
    for (const [n, customer, sku, amountCents] of [[1, "ada", "book", 1299], [2, "mallory", "lamp", 8900]] as const) {
      const res = await fetch(`${base}/orders`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ orderId: `${run}-${n}`, customer, sku, quantity: 1, amountCents })
      })
      assert.strictEqual(res.status, 202, await res.text())
    }
    const deadline = Date.now() + 60_000
    let exposed = new Set<string>()
    let missing: Array<string> = [...wanted]
    // The stats loops and the sagas take a moment: wait until every name is there (or time runs out).
    while (Date.now() < deadline) {
      const scrape = Prometheus.parse(await (await fetch(`${base}/metrics`)).text())
      exposed = new Set(scrape.samples.map((s) => s.name))
      missing = [...wanted].filter((name) => !exposed.has(name))
      if (missing.length === 0) break
      await new Promise((r) => setTimeout(r, 200))
    }
    assert.deepStrictEqual(
      missing,
      [],
      `dashboard metrics missing from /metrics (exposed: ${
        [...exposed].filter((n) => n.startsWith("tidings_")).join(", ")
      })`
    )
    assert.isAtLeast(wanted.size, 20)
  }, 120_000)
})
