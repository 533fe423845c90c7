/**
 * Human-readable output (stderr) for the benchmarks: progress lines and aligned tables.
 * @module
 */

/** A progress or result line on stderr. */
export const log = (message: string): void => {
  process.stderr.write(`${message}\n`)
}

/** A right-aligned text table (first column left-aligned) on stderr. */
export const table = (headers: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): void => {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ").trimEnd()
  log(line(headers))
  log(widths.map((w) => "-".repeat(w)).join("  "))
  for (const row of rows) log(line(row))
}

/** An integer with thousands separators: `52,314`. */
export const int = (n: number): string => Math.round(n).toLocaleString("en-US")

/** Milliseconds with a precision that suits their size. */
export const ms = (n: number): string => (n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : n.toFixed(0))

/** Seconds with one decimal. */
export const secs = (n: number): string => n.toFixed(1)
