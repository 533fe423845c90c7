import { Effect, Option, Tracer } from "effect"

// W3C trace context (https://www.w3.org/TR/trace-context/): version-traceid-parentid-flags.
const pattern = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/** The `traceparent` of the current span, if any. */
export const current: Effect.Effect<Option.Option<string>> = Effect.map(
  Effect.option(Effect.currentSpan),
  Option.map((span) => format(span.traceId, span.spanId, span.sampled))
)

export const format = (traceId: string, spanId: string, sampled: boolean): string =>
  `00-${traceId.padStart(32, "0").slice(-32)}-${spanId.padStart(16, "0").slice(-16)}-${sampled ? "01" : "00"}`

/** Parses a `traceparent` header into a parent span for `Effect.withSpan({ parent })`. */
export const parse = (header: string | undefined): Tracer.ExternalSpan | undefined => {
  if (header === undefined) return undefined
  const m = pattern.exec(header.trim().toLowerCase())
  if (m === null || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined
  return Tracer.externalSpan({ traceId: m[1]!, spanId: m[2]!, sampled: (parseInt(m[3]!, 16) & 1) === 1 })
}
