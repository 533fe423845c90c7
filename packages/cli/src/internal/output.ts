/**
 * Where the commands write: human text (tables) or JSON on standard output, progress bars and
 * problems on standard error. A service, so that tests capture exactly what a user would see.
 */
import { Context, Effect } from "effect"

/** The output service. */
export interface Service {
  /** Writes text to standard output (no newline added). */
  readonly write: (text: string) => void
  /** Writes text to standard error (no newline added). */
  readonly error: (text: string) => void
  /** Standard error is a terminal: progress bars redraw in place. */
  readonly interactive: boolean
  readonly columns: number
}

/** Standard output and error of the process. */
export const Output: Context.Reference<Service> = Context.Reference<Service>("@tidings/cli/Output", {
  defaultValue: () => ({
    write: (text) => process.stdout.write(text),
    error: (text) => process.stderr.write(text),
    interactive: process.stderr.isTTY === true,
    columns: process.stdout.columns ?? 100
  })
})

/** The output service of this run. */
export const current: Effect.Effect<Service> = Effect.gen(function*() {
  return yield* Output
})

/** Writes lines to standard output. */
export const line = (...lines: ReadonlyArray<string>): Effect.Effect<void> =>
  Effect.map(current, (o) => o.write(lines.map((l) => `${l}\n`).join("")))

/** Writes a value as indented JSON (bigints as strings, dates as ISO text). */
export const json = (value: unknown): Effect.Effect<void> =>
  line(JSON.stringify(value, (_k, v: unknown) => typeof v === "bigint" ? v.toString() : v, 2))

/** Writes a warning line to standard error. */
export const warn = (text: string): Effect.Effect<void> => Effect.map(current, (o) => o.error(`${text}\n`))

const cell = (value: unknown): string => {
  if (value === null || value === undefined) return "—"
  if (value instanceof Date) return value.toISOString().replace("T", " ").slice(0, 19)
  return String(value).replace(/\s+/g, " ")
}

/** A table: a header row and aligned columns; long cells are cut to `max` characters. */
export const table = (
  headers: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<unknown>>,
  options: { readonly max?: number; readonly empty?: string } = {}
): Effect.Effect<void> => {
  if (rows.length === 0) return line(options.empty ?? "(none)")
  const max = options.max ?? 60
  const text = rows.map((r) =>
    r.map((v) => {
      const s = cell(v)
      return s.length > max ? `${s.slice(0, max - 1)}…` : s
    })
  )
  const widths = headers.map((h, i) => Math.max(h.length, ...text.map((r) => r[i]?.length ?? 0)))
  const render = (r: ReadonlyArray<string>) =>
    r.map((v, i) => i === r.length - 1 ? v : v.padEnd(widths[i]!)).join("  ").trimEnd()
  return line(render(headers.map((h) => h.toUpperCase())), ...text.map(render))
}

/** `1.2 s`, `3 min 4 s`, `2 h 5 min`. */
export const duration = (ms: number | null): string => {
  if (ms === null) return "—"
  if (ms < 1000) return `${Math.round(ms)} ms`
  const s = ms / 1000
  if (s < 60) return `${s.toFixed(1)} s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`
  return `${Math.floor(m / 60)} h ${m % 60} min`
}

/**
 * A progress reporter for long operations (bulk retry, replay): a bar redrawn in place on an
 * interactive standard error, one line per tenth otherwise; `done` ends it.
 */
export const progress = (label: string) =>
  Effect.map(current, (o) => {
    let lastTenth = -1
    const draw = (done: number, total: number) => {
      const ratio = total <= 0 ? 1 : Math.min(1, done / total)
      const width = 30
      const filled = Math.round(ratio * width)
      const bar = `${label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${
        Math.round(ratio * 100)
      }% ${done}/${total}`
      if (o.interactive) o.error(`\r${bar}`)
      else {
        const tenth = Math.floor(ratio * 10)
        if (tenth !== lastTenth) {
          lastTenth = tenth
          o.error(`${bar}\n`)
        }
      }
    }
    return {
      report: (done: number, total: number) => Effect.sync(() => draw(done, total)),
      end: Effect.sync(() => {
        if (o.interactive) o.error("\n")
      })
    }
  })
