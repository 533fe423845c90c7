/**
 * `/metrics` renders through Effect's `PrometheusMetrics`; its output is the same as the
 * hand-written formatter's it replaced (kept in fixtures/prometheusLegacy.ts as the reference),
 * for every metric Tidings defines and for an app's own metrics of every type.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Metrics from "@tidings/core/Metrics"
import { Duration, Effect, Metric } from "effect"
import * as Prometheus from "../src/Prometheus.ts"
import * as Legacy from "./fixtures/prometheusLegacy.ts"

/** Every Tidings metric, updated the way the relay, consumers, inbox and sagas do. */
const tidingsMetrics = Effect.gen(function*() {
  yield* Metric.update(Metrics.outboxPending, 12)
  yield* Metric.update(Metrics.outboxFailed, 1)
  yield* Metric.update(Metrics.outboxOldestPendingAge, 3.25)
  for (const v of [0.0007, 0.004, 0.02, 0.3, 2.5]) yield* Metric.update(Metrics.publishLatency, v)
  yield* Metric.update(Metrics.published, 41)
  yield* Metric.update(Metrics.retried, 3)
  yield* Metric.update(Metrics.failed, 1)
  yield* Metric.update(Metrics.reclaimed, 2)
  yield* Metric.update(Metrics.pruned, 1000)
  for (const source of ["local", "notify", "poll"]) {
    yield* Metric.update(Metric.withAttributes(Metrics.wakeups, { source }), 5)
  }
  for (const n of [1, 7, 100]) yield* Metric.update(Metrics.batchSize, n)
  for (const consumer of ["inventory", "payment"]) {
    const c = { consumer }
    yield* Metric.update(Metric.withAttributes(Metrics.consumer.consumed, c), 10)
    yield* Metric.update(Metric.withAttributes(Metrics.consumer.acked, c), 9)
    yield* Metric.update(Metric.withAttributes(Metrics.consumer.retried, { ...c, mode: "delayed" }), 1)
    yield* Metric.update(Metric.withAttributes(Metrics.consumer.deadLettered, { ...c, reason: "Failure" }), 1)
    yield* Metric.update(Metric.withAttributes(Metrics.consumer.unavailable, c), 0)
    yield* Metric.update(Metric.withAttributes(Metrics.consumer.defects, c), 0)
    for (const [outcome, v] of [["Success", 0.002], ["Failure", 0.04]] as const) {
      yield* Metric.update(Metric.withAttributes(Metrics.consumer.handleDuration, { ...c, outcome }), v)
    }
  }
  yield* Metric.update(Metrics.saga.started, 5)
  for (const status of ["completed", "compensated"]) {
    yield* Metric.update(Metric.withAttributes(Metrics.saga.finished, { status }), 2)
  }
  yield* Metric.update(Metric.withAttributes(Metrics.saga.stepDuration, { saga: "checkout", step: "reserve" }), 0.012)
  yield* Metric.update(Metric.withAttributes(Metrics.saga.compensations, { outcome: "compensated" }), 2)
  yield* Metric.update(Metrics.saga.recoveries, 1)
  for (const status of ["running", "completed", "failed"]) {
    yield* Metric.update(Metric.withAttributes(Metrics.saga.byStatus, { status }), 4)
  }
  yield* Metric.update(
    Metric.withAttributes(Metrics.inbox.handled, { consumer: "projection", outcome: "processed" }),
    8
  )
  yield* Metric.update(
    Metric.withAttributes(Metrics.inbox.handled, { consumer: "projection", outcome: "duplicate" }),
    1
  )
})

/** An app's own metrics, of every type, with labels that need sanitizing and escaping. */
const appMetrics = Effect.gen(function*() {
  const requests = Metric.counter("http.requests-total", { description: "Requests\nserved", incremental: true })
  yield* Metric.update(Metric.withAttributes(requests, { "route.name": "/orders", method: "POST" }), 3)
  yield* Metric.update(Metric.withAttributes(requests, { "route.name": "say \"hi\"\\\n", method: "GET" }), 2)
  yield* Metric.update(Metric.gauge("inflight", { description: "Requests in flight" }), 7)
  yield* Metric.update(Metric.gauge("9lives", { description: "Lives" }), -1)
  const latency = Metric.histogram("latency_seconds", { description: "Latency", boundaries: [0.1, 0.5, 1] })
  for (const v of [0.05, 0.3, 0.3, 2]) yield* Metric.update(latency, v)
  yield* Metric.update(Metric.withAttributes(latency, { path: "/x" }), 0.2)
  const sizes = Metric.summary("size_bytes", {
    description: "Sizes",
    maxAge: "1 minute",
    maxSize: 100,
    quantiles: [0.5, 0.9]
  })
  for (const v of [10, 20, 30]) yield* Metric.update(sizes, v)
  const statuses = Metric.frequency("http_status", { description: "Statuses" })
  for (const v of ["200", "200", "404"]) yield* Metric.update(statuses, v)
  yield* Metric.update(
    Metric.timer("handler_duration", { description: "Handler time", boundaries: [1, 10, 100] }),
    Duration.millis(5)
  )
})

const fresh = <A, E>(effect: Effect.Effect<A, E>) =>
  effect.pipe(Effect.provideService(Metric.MetricRegistry, new Map()), Effect.runPromise)

describe("Prometheus output: Effect's PrometheusMetrics, unchanged from the hand-written formatter", () => {
  it("every Tidings metric", () =>
    fresh(Effect.gen(function*() {
      yield* tidingsMetrics
      const text = yield* Prometheus.render
      assert.strictEqual(text, yield* Legacy.render)
      assert.include(text, "# TYPE tidings_outbox_publish_latency_seconds histogram")
      assert.include(
        text,
        "tidings_consumer_handle_duration_seconds_bucket{consumer=\"inventory\",outcome=\"Success\",le=\"+Inf\"} 1"
      )
    })))

  it("an app's metrics of every type, with a prefix and a filter", () =>
    fresh(Effect.gen(function*() {
      yield* appMetrics
      yield* tidingsMetrics
      assert.strictEqual(yield* Prometheus.render, yield* Legacy.render)
      const options = { prefix: "app_", filter: (id: string) => !id.startsWith("tidings_") }
      const prefixed = yield* Prometheus.renderWith(options)
      assert.strictEqual(prefixed, yield* Legacy.renderWith(options))
      assert.include(prefixed, "app_http_requests_total{route_name=\"/orders\",method=\"POST\"} 3")
    })))

  it("nothing registered: empty", () =>
    fresh(Effect.gen(function*() {
      assert.strictEqual(yield* Prometheus.render, "")
      assert.strictEqual(yield* Legacy.render, "")
    })))
})
