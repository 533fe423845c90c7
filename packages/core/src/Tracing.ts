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
export const formatTraceparent = (span: { readonly traceId: string; readonly spanId: string; readonly sampled: boolean }): string =>
  `00-${span.traceId.padStart(32, "0").slice(-32)}-${span.spanId.padStart(16, "0").slice(-16)}-${span.sampled ? "01" : "00"}`

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
