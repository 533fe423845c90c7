/**
 * Small statistics helpers.
 * @module
 */

/** Nearest-rank percentile of an ascending-sorted sample (`p` in 0..100); NaN when empty. */
export const percentile = (sorted: ArrayLike<number>, p: number): number => {
  if (sorted.length === 0) return Number.NaN
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!
}

/** Sorts a copy ascending (numeric). */
export const sorted = (values: ReadonlyArray<number>): Float64Array => Float64Array.from(values).sort()

/** Rounds to `digits` decimals (for JSON output). */
export const round = (n: number, digits = 2): number => {
  const f = 10 ** digits
  return Math.round(n * f) / f
}

/** A figure measured several times: the median with the range, and every sample. */
export interface Summary {
  readonly median: number
  readonly min: number
  readonly max: number
  readonly samples: ReadonlyArray<number>
}

/** Median (mean of the middle two for an even count), min and max of `samples`; NaN when empty. */
export const summarize = (samples: ReadonlyArray<number>, digits = 2): Summary => {
  const s = sorted(samples.filter((n) => Number.isFinite(n)))
  if (s.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN, samples: [...samples] }
  const mid = s.length >> 1
  const median = s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
  return {
    median: round(median, digits),
    min: round(s[0]!, digits),
    max: round(s[s.length - 1]!, digits),
    samples: samples.map((n) => round(n, digits))
  }
}
