/**
 * A local OTLP/HTTP JSON receiver for tests: a small HTTP server on 127.0.0.1 accepting
 * `POST /v1/traces`, `/v1/metrics` and `/v1/logs`, keeping what it got: the spans flattened (ids as
 * hex, attributes as plain values) and the metric names.
 */
import * as http from "node:http"

/** A span as received, its attributes as plain values. */
export interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  /** OTLP span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  readonly kind: number
  readonly attributes: Readonly<Record<string, unknown>>
  readonly links: ReadonlyArray<{ readonly traceId: string; readonly spanId: string }>
  readonly service: string | undefined
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  readonly status: number
}

interface AnyValue {
  readonly stringValue?: string
  readonly intValue?: string | number
  readonly doubleValue?: number
  readonly boolValue?: boolean
  readonly arrayValue?: { readonly values?: ReadonlyArray<AnyValue> }
}

const valueOf = (v: AnyValue | undefined): unknown =>
  v === undefined ?
    undefined
    : v.stringValue !== undefined ?
    v.stringValue
    : v.intValue !== undefined ?
    Number(v.intValue)
    : v.doubleValue !== undefined ?
    v.doubleValue
    : v.boolValue !== undefined ?
    v.boolValue
    : v.arrayValue !== undefined ?
    (v.arrayValue.values ?? []).map(valueOf)
    : undefined

const attributesOf = (list: ReadonlyArray<{ readonly key: string; readonly value?: AnyValue }> | undefined) =>
  Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]))

/** OTLP/JSON ids are hex; some encoders send base64: both read as lower-case hex. */
const hex = (id: unknown): string => {
  if (typeof id !== "string" || id === "") return ""
  if (/^[0-9a-f]+$/i.test(id)) return id.toLowerCase()
  return Buffer.from(id, "base64").toString("hex")
}

/** Starts the receiver on a free port; `close()` stops it. */
export const startOtlpReceiver = async () => {
  const spans: Array<ReceivedSpan> = []
  const metricNames = new Set<string>()
  const requests: Array<string> = []
  const server = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      requests.push(`${req.method} ${req.url} ${req.headers["content-type"] ?? ""}`)
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}")
        if (req.url === "/v1/traces") {
          for (const rs of body.resourceSpans ?? []) {
            const service = attributesOf(rs.resource?.attributes)["service.name"] as string | undefined
            for (const ss of rs.scopeSpans ?? []) {
              for (const s of ss.spans ?? []) {
                spans.push({
                  traceId: hex(s.traceId),
                  spanId: hex(s.spanId),
                  parentSpanId: hex(s.parentSpanId) || undefined,
                  name: s.name,
                  kind: s.kind,
                  attributes: attributesOf(s.attributes),
                  links: (s.links ?? []).map((l: { traceId: string; spanId: string }) => ({
                    traceId: hex(l.traceId),
                    spanId: hex(l.spanId)
                  })),
                  service,
                  status: s.status?.code ?? 0
                })
              }
            }
          }
        } else if (req.url === "/v1/metrics") {
          for (const rm of body.resourceMetrics ?? []) {
            for (const sm of rm.scopeMetrics ?? []) for (const m of sm.metrics ?? []) metricNames.add(m.name)
          }
        }
        res.writeHead(200, { "content-type": "application/json" })
        res.end("{}")
      } catch {
        res.writeHead(400)
        res.end()
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const address = server.address()
  const port = typeof address === "object" && address !== null ? address.port : 0
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    metricNames,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}
