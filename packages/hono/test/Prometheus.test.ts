import { describe, expect, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as Outbox from "@tidings/core/Outbox"
import { Duration, Effect, Metric, Schema } from "effect"
import { Hono } from "hono"
import * as Prometheus from "../src/Prometheus.ts"
import * as Routes from "../src/Routes.ts"
import * as Runtime from "../src/Runtime.ts"
import { type Family, memoryLayer, parsePrometheus, waitUntil } from "./support.ts"

const sample = (family: Family | undefined, name: string, labels: Record<string, string> = {}) =>
  family?.samples.find((s) =>
    s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === JSON.stringify(Object.entries(labels).sort())
  )?.value

/** Checks the histogram invariants a scraper relies on; returns the buckets by `le`. */
const checkHistogram = (family: Family | undefined, name: string, labels: Record<string, string> = {}) => {
  expect(family?.type).toBe("histogram")
  const same = (l: Readonly<Record<string, string>>) => {
    const { le: _, ...rest } = l
    return JSON.stringify(Object.entries(rest).sort()) === JSON.stringify(Object.entries(labels).sort())
  }
  const buckets = family!.samples.filter((s) => s.name === `${name}_bucket` && same(s.labels))
  const les = buckets.map((b) => b.labels["le"]!)
  expect(les.at(-1)).toBe("+Inf")
  const bounds = les.map((le) => le === "+Inf" ? Infinity : Number(le))
  for (let i = 1; i < bounds.length; i++) expect(bounds[i]!).toBeGreaterThan(bounds[i - 1]!)
  for (let i = 1; i < buckets.length; i++) expect(buckets[i]!.value).toBeGreaterThanOrEqual(buckets[i - 1]!.value)
  const count = sample(family, `${name}_count`, labels)
  expect(buckets.at(-1)!.value).toBe(count)
  expect(sample(family, `${name}_sum`, labels)).toBeTypeOf("number")
  return new Map(buckets.map((b) => [b.labels["le"]!, b.value]))
}

describe("Prometheus", () => {
  it("formats every metric type with HELP/TYPE, sanitized names, attributes as labels, escaped values", () =>
    Effect.gen(function*() {
      const requests = Metric.counter("http.requests-total", { description: "Requests\nserved", incremental: true })
      const inflight = Metric.gauge("inflight")
      const latency = Metric.histogram("latency_seconds", { description: "Latency", boundaries: [0.1, 0.5, 1] })
      const sizes = Metric.summary("size_bytes", { maxAge: "1 minute", maxSize: 100, quantiles: [0.5, 0.9] })
      const statuses = Metric.frequency("http_status")
      const timer = Metric.timer("handler_duration", { boundaries: [1, 10, 100] })
      const odd = Metric.gauge("9lives")
      yield* Metric.update(Metric.withAttributes(requests, { "route.name": "/orders", method: "POST" }), 3)
      yield* Metric.update(Metric.withAttributes(requests, { "route.name": "say \"hi\"\\\n", method: "GET" }), 2)
      yield* Metric.update(inflight, 7)
      for (const v of [0.05, 0.3, 0.3, 2]) yield* Metric.update(latency, v)
      yield* Metric.update(Metric.withAttributes(latency, { le: "user", path: "/x" }), 0.2)
      for (const v of [10, 20, 30]) yield* Metric.update(sizes, v)
      for (const v of ["200", "200", "404"]) yield* Metric.update(statuses, v)
      yield* Metric.update(timer, Duration.millis(5))
      yield* Metric.update(odd, -1)

      const text = yield* Prometheus.render
      const families = parsePrometheus(text)

      const req = families.get("http_requests_total")
      expect(req?.type).toBe("counter")
      expect(req?.help).toBe("Requests\\nserved")
      expect(sample(req, "http_requests_total", { route_name: "/orders", method: "POST" })).toBe(3)
      expect(sample(req, "http_requests_total", { route_name: "say \"hi\"\\\n", method: "GET" })).toBe(2)
      expect(text).toContain(`route_name="say \\"hi\\"\\\\\\n"`)

      expect(families.get("inflight")?.type).toBe("gauge")
      expect(families.get("inflight")?.help).toBe("inflight") // no description: the name stands in
      expect(sample(families.get("inflight"), "inflight")).toBe(7)
      expect(sample(families.get("_9lives"), "_9lives")).toBe(-1)

      const buckets = checkHistogram(families.get("latency_seconds"), "latency_seconds", {})
      expect([...buckets]).toEqual([["0.1", 1], ["0.5", 3], ["1", 3], ["+Inf", 4]])
      expect(sample(families.get("latency_seconds"), "latency_seconds_sum", {})).toBeCloseTo(2.65)
      // A user attribute named `le` does not clash with the bucket label.
      const labelled = checkHistogram(families.get("latency_seconds"), "latency_seconds", {
        exported_le: "user",
        path: "/x"
      })
      expect(labelled.get("0.5")).toBe(1)

      const summary = families.get("size_bytes")
      expect(summary?.type).toBe("summary")
      expect(sample(summary, "size_bytes_count")).toBe(3)
      expect(sample(summary, "size_bytes_sum")).toBe(60)
      expect(summary?.samples.some((s) => s.labels["quantile"] === "0.5")).toBe(true)

      expect(families.get("http_status")?.type).toBe("counter")
      expect(sample(families.get("http_status"), "http_status", { key: "200" })).toBe(2)
      expect(sample(families.get("http_status"), "http_status", { key: "404" })).toBe(1)

      // The timer's unit attribute is no label.
      const timed = checkHistogram(families.get("handler_duration"), "handler_duration", {})
      expect(timed.get("10")).toBe(1)
      expect(families.get("handler_duration")!.samples.every((s) => !("time_unit" in s.labels))).toBe(true)

      // Families are sorted, and the prefix option applies to all of them.
      const names = [...families.keys()]
      expect(names).toEqual([...names].sort())
      const prefixed = parsePrometheus(
        yield* Prometheus.renderWith({ prefix: "app_", filter: (id) => id === "inflight" })
      )
      expect([...prefixed.keys()]).toEqual(["app_inflight"])
    }).pipe(Effect.provideService(Metric.MetricRegistry, new Map()), Effect.runPromise))

  it("a name shared by two metric types keeps the first family only (a scraper would reject the page)", () =>
    Effect.gen(function*() {
      yield* Metric.update(Metric.counter("a.b", { incremental: true }), 1)
      yield* Metric.update(Metric.gauge("a_b"), 5)
      const families = parsePrometheus(yield* Prometheus.render)
      expect(families.get("a_b")?.type).toBe("counter")
      expect(families.get("a_b")?.samples).toHaveLength(1)
      expect(Prometheus.format([])).toBe("")
    }).pipe(Effect.provideService(Metric.MetricRegistry, new Map()), Effect.runPromise))

  it("GET /metrics serves the registry: the relay's counters and histograms after publishing", async () => {
    const rt = await Runtime.make(memoryLayer())
    try {
      const Pinged = Event.define("metrics.pinged", { aggregateType: "ping", schema: Schema.Struct({ n: Schema.Int }) })
      const n = 5
      await rt.runPromise(
        Outbox.transaction(Effect.forEach(
          Array.from({ length: n }, (_, i) => i),
          (i) => Outbox.append(Pinged, { aggregateId: `ping-${i}`, payload: { n: i } })
        ))
      )
      await waitUntil(
        async () => (await rt.runPromise(MemoryBroker.MemoryBroker.use((b) => b.delivered))).length >= n,
        10_000,
        "publishing"
      )

      const app = new Hono()
      app.route("/", Routes.metrics(rt))
      const res = await app.request("/metrics")
      expect(res.status).toBe(200)
      expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8")
      const families = parsePrometheus(await res.text())

      const published = families.get("tidings_outbox_published_total")
      expect(published?.type).toBe("counter")
      expect(published?.help).toBe("Events published")
      expect(sample(published, "tidings_outbox_published_total")).toBeGreaterThanOrEqual(n)

      const latency = checkHistogram(
        families.get("tidings_outbox_publish_latency_seconds"),
        "tidings_outbox_publish_latency_seconds"
      )
      expect(latency.get("+Inf")).toBeGreaterThanOrEqual(n)
      const batches = checkHistogram(families.get("tidings_relay_batch_size"), "tidings_relay_batch_size")
      expect(batches.get("+Inf")).toBeGreaterThanOrEqual(1)
      // The relay's stats loop samples the pending gauge.
      expect(families.get("tidings_outbox_pending")?.type).toBe("gauge")
    } finally {
      await rt.dispose()
    }
  })
})
