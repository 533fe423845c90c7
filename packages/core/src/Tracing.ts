/**
 * Trace context across the outbox, brokers and consumers: the W3C `traceparent` an append records in
 * the message headers, and the parent span a relay or consumer continues from it. Every package uses
 * this module (no copies); parsing is Effect's own `HttpTraceContext`.
 * @since 0.1.0
 * @module
 */
import { Effect, Option, Tracer } from "effect"
import { Headers, HttpTraceContext } from "effect/http"

/**
 * The header that carries the W3C trace context of the append.
 * @since 0.1.0
 * @category constants
 */
export const traceparentHeader = "traceparent"

/**
 * Span options for spans opened per message or per batch: no call-site stack capture. It would
 * always point into Tidings itself, and an `Error` per span is a measurable share of the
 * per-message cost.
 * @since 0.1.0
 * @category constants
 */
export const noStack = { captureStackTrace: false } as const

/**
 * Formats a span's identity as a `traceparent` header value.
 * @since 0.1.0
 * @category formatting
 */
export const formatTraceparent = (
  span: { readonly traceId: string; readonly spanId: string; readonly sampled: boolean }
): string =>
  `00-${span.traceId.padStart(32, "0").slice(-32)}-${span.spanId.padStart(16, "0").slice(-16)}-${
    span.sampled ? "01" : "00"
  }`

/**
 * The `traceparent` of the current span, if any.
 * @since 0.1.0
 * @category accessors
 */
export const currentTraceparent: Effect.Effect<Option.Option<string>> = Effect.map(
  Effect.option(Effect.currentSpan),
  Option.map(formatTraceparent)
)

/**
 * Parses a `traceparent` value into a parent span for `Effect.withSpan({ parent })`; `undefined`
 * for a missing or malformed value (it is ignored, never an error).
 * @since 0.1.0
 * @category parsing
 */
export const parseTraceparent = (value: unknown): Tracer.ExternalSpan | undefined => {
  if (typeof value !== "string" || value.length > 128) return undefined
  const span = HttpTraceContext.w3c(Headers.fromRecordUnsafe({ traceparent: value.trim().toLowerCase() }))
  return Option.getOrUndefined(span)
}

/**
 * The parent span recorded in a message's (or request's) headers, if any.
 * @since 0.1.0
 * @category parsing
 */
export const parentFromHeaders = (headers: Readonly<Record<string, unknown>>): Tracer.ExternalSpan | undefined =>
  parseTraceparent(headers[traceparentHeader])

/**
 * Where a publisher sends messages, as the OpenTelemetry messaging conventions name it: the
 * `messaging.system` (`rabbitmq`, `tidings-memory`, `webhooks`, ...), the destination (an exchange,
 * a topic, an endpoint) and the server it talks to, a host (never a URL) and a port. Relays put it
 * on their `send` spans.
 * @since 0.1.0
 * @category models
 */
export interface Destination {
  /** `messaging.system` */
  readonly system: string
  /** `messaging.destination.name`: the exchange, topic or endpoint; span names end with it (`send orders.events`). */
  readonly name?: string | undefined
  /** `server.address`: a host name or an IP address. */
  readonly serverAddress?: string | undefined
  /** `server.port` */
  readonly serverPort?: number | undefined
}

/**
 * The attributes of a messaging span (OpenTelemetry messaging conventions): the operation's type
 * (`create`, `send`, `receive`, `process`, `settle`) and name, the system, the destination and its
 * server.
 * @since 0.1.0
 * @category constructors
 */
export const messagingAttributes = (
  operation: { readonly type: "create" | "send" | "receive" | "process" | "settle"; readonly name: string },
  destination: Destination | undefined
): Record<string, string | number> => {
  const out: Record<string, string | number> = {
    "messaging.operation.type": operation.type,
    "messaging.operation.name": operation.name,
    "messaging.system": destination?.system ?? "unknown"
  }
  if (destination?.name !== undefined) out["messaging.destination.name"] = destination.name
  if (destination?.serverAddress !== undefined) out["server.address"] = destination.serverAddress
  if (destination?.serverPort !== undefined) out["server.port"] = destination.serverPort
  return out
}

/**
 * A span name of the conventions: `<operation> <destination>`, or the operation alone when the
 * destination is unknown.
 * @since 0.1.0
 * @category constructors
 */
export const spanName = (operation: string, destination: string | undefined): string =>
  destination === undefined || destination === "" ? operation : `${operation} ${destination}`

/**
 * The host and port of a URL, for `server.address` / `server.port` (never the URL itself, which
 * may hold credentials).
 * @since 0.1.0
 * @category constructors
 */
export const serverOf = (
  url: string,
  defaultPort?: number
): { readonly serverAddress?: string; readonly serverPort?: number } => {
  try {
    const u = new URL(url)
    const port = u.port === "" ? defaultPort : Number(u.port)
    return {
      serverAddress: u.hostname.replace(/^\[(.*)\]$/, "$1"),
      ...(port === undefined ? {} : { serverPort: port })
    }
  } catch {
    return {}
  }
}
