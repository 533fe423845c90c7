/**
 * Tracing an order end to end with Effect's OTLP exporter: the orders example, with
 * `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a local OTLP/HTTP JSON receiver, on the in-memory broker
 * and on RabbitMQ. One order placed over HTTP with a `traceparent` makes ONE trace: the HTTP server
 * span → `create inventory.reserve` (the saga's first command, appended in the request's
 * transaction) → `send <destination>` (a child of the create span, linked to it) → `process
 * inventory` → the reply's create / send → `process orders-saga` → `saga.step reserve-inventory`,
 * and on to the payment; with the messaging conventions' attributes. The metrics go to
 * `/v1/metrics` too.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as path from "node:path"
import * as Domain from "../examples/orders/domain.ts"
import * as Transport from "../examples/orders/transport.ts"
import { amqpUrl, rawChannel } from "../packages/rabbitmq/test/helpers.ts"
import { type ReceivedSpan, startOtlpReceiver } from "./support/otlpReceiver.ts"
import { pgClientLayer, pgUrl, schemaName } from "./support/pg.ts"
import { currentRuntime, spawnOn, stopChild, waitForOutput } from "./support/processes.ts"

const script = path.join(import.meta.dirname, "../examples/orders/main.ts")
const runtime = currentRuntime()
const SERVER = 2
const PRODUCER = 4
const CONSUMER = 5

const until = async <A>(
  what: string,
  f: () => A | Promise<A>,
  ok: (a: A) => boolean,
  timeoutMs = 60_000
): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  let last: A = await f()
  while (!ok(last)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 100))
    last = await f()
  }
  return last
}

const cleanup = async (schema: string, rabbit: boolean) => {
  await Effect.runPromise(
    SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(
      Effect.provide(pgClientLayer(pgUrl(), 1)),
      Effect.ignore
    )
  )
  if (!rabbit) return
  await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const channel = yield* rawChannel()
    const names = Transport.rabbitmqNames(`tidings.${schema}`, Object.values(Domain.consumers))
    yield* Effect.promise(async () => {
      for (const q of names.queues) await channel.deleteQueue(q).catch(() => undefined)
      for (const e of names.exchanges) await channel.deleteExchange(e).catch(() => undefined)
    })
  })))
}

const traceOf = (broker: "memory" | "rabbitmq") =>
  describe(`one trace per order, exported over OTLP (orders example on ${runtime}, ${broker} broker)`, () => {
    const cleanups: Array<() => Promise<void>> = []
    afterAll(async () => {
      for (const f of cleanups.reverse()) await f()
    }, 60_000)

    it(
      "HTTP request → create → send → process → saga step, one trace id, parents and links, the conventions' attributes",
      async () => {
        const receiver = await startOtlpReceiver()
        cleanups.push(receiver.close)
        const schema = schemaName("otlp")
        const child = spawnOn(runtime, script, ["--serve"], {
          TIDINGS_PG_URL: pgUrl(),
          TIDINGS_AMQP_URL: broker === "rabbitmq" ? amqpUrl() : "",
          TIDINGS_SCHEMA: schema,
          TIDINGS_ADMIN_TOKEN: "otlp-test-token-0123456789abcdefghij",
          TIDINGS_HTTP_PORT: "0",
          TIDINGS_LOG_LEVEL: "Error",
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
          OTEL_SERVICE_NAME: "orders-otlp-test",
          OTEL_BSP_SCHEDULE_DELAY: "200",
          OTEL_METRIC_EXPORT_INTERVAL: "500",
          OTEL_LOGS_EXPORTER: "none"
        })
        cleanups.push(async () => {
          await stopChild(child)
          await cleanup(schema, broker === "rabbitmq")
        })
        await waitForOutput(child, "serving; Ctrl-C stops", 60_000)
        const base = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(child.output())![1]!

        // The caller's own trace: the order is part of it.
        const traceId = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0"))
          .join("")
        const callerSpan = "a1b2c3d4e5f60718"
        const orderId = `otlp-${Date.now().toString(36)}`
        const placed = await fetch(`${base}/orders`, {
          method: "POST",
          headers: { "content-type": "application/json", traceparent: `00-${traceId}-${callerSpan}-01` },
          body: JSON.stringify({ orderId, customer: "ada", sku: "book", quantity: 1, amountCents: 1299 })
        })
        assert.strictEqual(placed.status, 202, await placed.text())
        await until(
          "the order to be confirmed",
          async () => (await (await fetch(`${base}/orders/${orderId}`)).json()) as { order: { status: string } },
          (o) => o.order.status === "confirmed"
        )

        const inTrace = () => receiver.spans.filter((s) => s.traceId === traceId)
        const find = (name: string, where: (s: ReceivedSpan) => boolean = () => true) =>
          inTrace().find((s) => s.name === name && where(s))
        // Spans arrive in batches; wait until the last step's outcome is there.
        await until("the saga's last step span", () => find("saga.step charge-payment"), (s) => s !== undefined, 30_000)
          .catch((error) => {
            throw new Error(
              `${error.message}; received ${receiver.spans.length} spans (${inTrace().length} in the trace): ${
                inTrace().map((s) => s.name).join(", ")
              }; requests: ${receiver.requests.slice(0, 5).join(" | ")}; other names: ${
                [...new Set(receiver.spans.map((s) => s.name))].slice(0, 40).join(", ")
              }`
            )
          })
        const spans = inTrace()
        const byId = new Map(spans.map((s) => [s.spanId, s]))
        const ancestors = (span: ReceivedSpan): Array<string> => {
          const out: Array<string> = []
          for (let p = span.parentSpanId; p !== undefined; p = byId.get(p)?.parentSpanId) {
            out.push(byId.get(p)?.name ?? `?${p}`)
          }
          return out
        }

        const names = spans.map((s) => `${s.name} <- ${byId.get(s.parentSpanId ?? "")?.name ?? s.parentSpanId}`).join(
          "\n"
        )
        const server = find("POST /orders")!
        assert.isDefined(server, names)
        assert.strictEqual(server.kind, SERVER)
        assert.strictEqual(server.parentSpanId, callerSpan, "continues the caller's traceparent")
        assert.strictEqual(server.service, "orders-otlp-test")
        assert.deepInclude(server.attributes, {
          "http.request.method": "POST",
          "http.route": "/orders",
          "url.path": "/orders",
          "http.response.status_code": 202
        })

        const create = find("create inventory.reserve")!
        assert.isDefined(create, names)
        assert.strictEqual(create.kind, PRODUCER)
        assert.include(ancestors(create), "POST /orders")
        assert.deepInclude(create.attributes, {
          "messaging.operation.type": "create",
          "messaging.system": "tidings-outbox",
          "messaging.destination.name": "inventory.reserve"
        })

        const system = broker === "memory" ? "tidings-memory" : "rabbitmq"
        const send = find(
          broker === "memory" ? "send memory" : `send tidings.${schema}.events`,
          (s) => s.parentSpanId === create.spanId
        )!
        assert.isDefined(send, names)
        assert.strictEqual(send.kind, PRODUCER)
        assert.deepStrictEqual(
          send.links,
          [{ traceId, spanId: create.spanId }],
          "the send span links to the create span recorded in the row"
        )
        assert.deepInclude(send.attributes, {
          "messaging.operation.type": "send",
          "messaging.system": system,
          "messaging.message.id": create.attributes["messaging.message.id"]
        })
        if (broker === "rabbitmq") {
          assert.strictEqual(send.attributes["server.address"], "127.0.0.1")
          assert.isNumber(send.attributes["server.port"])
          assert.notInclude(JSON.stringify(spans), "guest:guest")
        }

        const queue = (consumer: string) => broker === "memory" ? consumer : `tidings.${schema}.${consumer}`
        const process = find(`process ${queue("inventory")}`, (s) => s.parentSpanId === send.spanId)!
        assert.isDefined(process, names)
        assert.strictEqual(process.kind, CONSUMER)
        assert.deepInclude(process.attributes, {
          "messaging.operation.type": "process",
          "messaging.system": system,
          "messaging.consumer.group.name": "inventory",
          "messaging.message.id": create.attributes["messaging.message.id"]
        })

        const step = find("saga.step reserve-inventory")!
        assert.isDefined(step, names)
        assert.deepInclude(step.attributes, {
          "tidings.saga.step": "reserve-inventory",
          "tidings.saga.step_outcome": "completed"
        })
        const chain = ancestors(step)
        assert.include(chain, `process ${queue("orders-saga")}`)
        assert.include(chain, "POST /orders")
        assert.include(chain, `process ${queue("inventory")}`)
        assert.deepStrictEqual(
          chain.slice(-2),
          ["POST /orders", `?${callerSpan}`],
          "the HTTP request is the root in this service, a child of the caller's span"
        )

        // The metrics went out too.
        // Waited for together: an export made before the first handle has the counters (registered at
        // zero when the relay starts) but not yet the handle histogram.
        const exported = ["tidings_outbox_published_total", "tidings_consumer_handle_duration_seconds"]
        await until("the metrics", () => receiver.metricNames, (names) => exported.every((n) => names.has(n)), 30_000)
          .catch((error) => {
            throw new Error(`${error.message}; received: ${[...receiver.metricNames].join(", ")}`)
          })

        // For the report: the trace, as received.
        console.log(`[otlp ${broker}] trace ${traceId}: ${spans.length} spans`)
        for (const s of spans) {
          const messaging = Object.entries(s.attributes).filter(([k]) =>
            k.startsWith("messaging.") || k.startsWith("http.") || k.startsWith("server.") ||
            k.startsWith("tidings.saga.step")
          )
          console.log(
            `[otlp ${broker}]   ${s.name} (kind ${s.kind}) <- ${
              byId.get(s.parentSpanId ?? "")?.name ?? s.parentSpanId ?? "root"
            }${
              s.links.length > 0
                ? ` links ${s.links.map((l) => byId.get(l.spanId)?.name ?? l.spanId).join(", ")}`
                : ""
            } ${JSON.stringify(Object.fromEntries(messaging))}`
          )
        }
      },
      180_000
    )
  })

traceOf("memory")
traceOf("rabbitmq")
