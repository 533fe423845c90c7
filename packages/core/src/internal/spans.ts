// Spans opened per message or per batch skip the call-site stack capture: it would always point
// into Tidings itself, and an `Error` per span is a measurable share of the per-message cost.
export const noStack = { captureStackTrace: false } as const
