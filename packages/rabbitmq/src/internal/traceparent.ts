// A copy of @tidings/core's W3C trace-context parser: packages never import a sibling's internals.
import { Tracer } from "effect"

// version-traceid-parentid-flags (https://www.w3.org/TR/trace-context/)
const pattern = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/** Parses a `traceparent` header into a parent span for `Effect.withSpan({ parent })`. */
export const parse = (header: unknown): Tracer.ExternalSpan | undefined => {
  if (typeof header !== "string") return undefined
  const m = pattern.exec(header.trim().toLowerCase())
  if (m === null || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined
  return Tracer.externalSpan({ traceId: m[1]!, spanId: m[2]!, sampled: (parseInt(m[3]!, 16) & 1) === 1 })
}

/** Formats a span as a `traceparent` header. */
export const format = (traceId: string, spanId: string, sampled: boolean): string =>
  `00-${traceId.padStart(32, "0").slice(-32)}-${spanId.padStart(16, "0").slice(-16)}-${sampled ? "01" : "00"}`
