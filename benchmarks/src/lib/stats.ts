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
