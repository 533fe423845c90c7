/**
 * Retention for the memory stores: deletes up to `limit` entries of `rows` that `expired` accepts,
 * in insertion order, and returns how many. Synchronous, so no other caller can interleave: the
 * memory stores need no retention lock.
 * @internal
 */
export const pruneRows = <K, V>(rows: Map<K, V>, limit: number, expired: (row: V) => boolean): number => {
  let n = 0
  for (const [key, row] of rows) {
    if (n >= limit) break
    if (expired(row)) {
      rows.delete(key)
      n++
    }
  }
  return n
}
