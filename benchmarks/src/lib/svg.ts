/**
 * Small, dependency-free SVG charts for the benchmark report: line charts (with min-max whiskers,
 * linear or log axes) and horizontal bar charts. Pure functions from data to SVG text.
 * @module
 */

/** A point; `min` / `max` draw a whisker (the range of the runs behind a median). */
export interface Point {
  readonly x: number
  readonly y: number
  readonly min?: number
  readonly max?: number
}

export interface Series {
  readonly name: string
  readonly points: ReadonlyArray<Point>
  readonly color?: string
  /** An SVG `stroke-dasharray`, e.g. `"6 3"`. */
  readonly dash?: string
}

export type Scale = "linear" | "log"

export interface LineChart {
  readonly title: string
  /** A smaller second line under the title. */
  readonly subtitle?: string
  readonly xLabel: string
  readonly yLabel: string
  readonly series: ReadonlyArray<Series>
  readonly xScale?: Scale
  readonly yScale?: Scale
  /** Tick values of the x axis (default: every x of the data). */
  readonly xTicks?: ReadonlyArray<number>
  /** A horizontal reference line, e.g. a target. */
  readonly hline?: { readonly y: number; readonly label: string }
  readonly width?: number
  readonly height?: number
}

export interface Bar {
  readonly label: string
  /** A smaller grey line under the label. */
  readonly sublabel?: string
  readonly value: number
  readonly min?: number
  readonly max?: number
  readonly color?: string
  /** Text after the bar (default: the value). */
  readonly note?: string
}

export interface BarChart {
  readonly title: string
  readonly subtitle?: string
  /** Axis label under the bars, e.g. `events/s`. */
  readonly unit: string
  readonly bars: ReadonlyArray<Bar>
  readonly width?: number
}

/** Colours that stay apart in print and for most colour-blind readers. */
export const palette = [
  "#4e79a7",
  "#f28e2b",
  "#59a14f",
  "#e15759",
  "#76b7b2",
  "#b07aa1",
  "#edc948",
  "#9c755f",
  "#ff9da7",
  "#bab0ac"
]

const font = `font-family="system-ui, -apple-system, 'Segoe UI', sans-serif"`

export const escape = (s: string): string =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

/** A number for a tick label: `1.5k`, `20k`, `0.5`, `250`. */
export const tickLabel = (n: number): string => {
  const abs = Math.abs(n)
  const trim = (s: string) => s.replace(/\.0+$/, "").replace(/(\.\d*?)0+$/, "$1")
  if (abs >= 1e6) return `${trim((n / 1e6).toFixed(1))}M`
  if (abs >= 1e3) return `${trim((n / 1e3).toFixed(abs >= 1e4 ? 0 : 1))}k`
  if (abs >= 1 || n === 0) return trim(n.toFixed(abs >= 10 ? 0 : 1))
  return trim(n.toPrecision(1))
}

/** About `count` round tick values covering [lo, hi] (1, 2, 2.5, 5 × 10^k steps). */
export const niceTicks = (lo: number, hi: number, count = 5): Array<number> => {
  if (!(hi > lo)) return [lo]
  const raw = (hi - lo) / count
  const mag = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag
  const ticks: Array<number> = []
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)))
  return ticks
}

/** Ticks of a log axis: 1, 2, 5 × 10^k within [lo, hi]. */
export const logTicks = (lo: number, hi: number): Array<number> => {
  const ticks: Array<number> = []
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    for (const m of [1, 2, 5]) {
      const t = m * 10 ** e
      if (t >= lo * 0.999 && t <= hi * 1.001) ticks.push(Number(t.toPrecision(12)))
    }
  }
  return ticks
}

const finite = (n: number | undefined): n is number => n !== undefined && Number.isFinite(n)

/** A mapping from data to pixels along one axis; `lo`/`hi` widened to round values. */
const axis = (values: ReadonlyArray<number>, scale: Scale, from: number, to: number, zero: boolean) => {
  const positive = values.filter((v) => (scale === "log" ? v > 0 : true))
  let lo = Math.min(...positive)
  let hi = Math.max(...positive)
  if (positive.length === 0) [lo, hi] = scale === "log" ? [1, 10] : [0, 1]
  if (scale === "log") {
    // Widen to the nearest 1-2-5 values around the data.
    const steps = (v: number) => [1, 2, 5].map((m) => m * 10 ** Math.floor(Math.log10(v)))
    lo = Math.max(...steps(lo).filter((t) => t <= lo * 1.0001))
    const up = [...steps(hi), 10 ** (Math.floor(Math.log10(hi)) + 1)].filter((t) => t >= hi * 0.9999)
    hi = Math.min(...up)
    if (hi <= lo) hi = lo * 10
    const f = (v: number) => from + ((Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * (to - from)
    return { map: f, ticks: logTicks(lo, hi) }
  }
  if (hi === lo && !zero && lo > 0) [lo, hi] = [lo * 0.5, hi * 1.5]
  if (zero) lo = Math.min(0, lo)
  if (hi === lo) hi = lo + 1
  const ticks = niceTicks(lo, hi)
  const step = ticks.length > 1 ? ticks[1]! - ticks[0]! : hi - lo
  hi = Math.max(hi, ticks[ticks.length - 1]!)
  if (hi < Math.max(...positive) * 1.02) hi += step
  const allTicks = niceTicks(lo, hi).filter((t) => t <= hi + 1e-9)
  const f = (v: number) => from + ((v - lo) / (hi - lo)) * (to - from)
  return { map: f, ticks: allTicks }
}

/** A line chart with a legend on the right; y whiskers show each point's min..max. */
export const lineChart = (c: LineChart): string => {
  const width = c.width ?? 760
  const height = c.height ?? 400
  const legendWidth = 20 + Math.max(120, ...c.series.map((s) => s.name.length * 6.8)) + 40
  const left = 70
  const right = width - legendWidth - 10
  const top = c.subtitle === undefined ? 40 : 56
  const bottom = height - 50
  const xs = c.series.flatMap((s) => s.points.map((p) => p.x))
  const ys = c.series.flatMap((s) => s.points.flatMap((p) => [p.y, p.min, p.max].filter(finite)))
  if (c.hline !== undefined) ys.push(c.hline.y)
  const xScale = c.xScale ?? "linear"
  const yScale = c.yScale ?? "linear"
  const x = axis(xs, xScale, left + 15, right - 15, false)
  const y = axis(ys, yScale, bottom, top, true)
  const xTicks = c.xTicks ?? [...new Set(xs)].sort((a, b) => a - b)
  const out: Array<string> = []
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ${font} font-size="12">`
  )
  out.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`)
  out.push(`<text x="10" y="22" font-size="15" font-weight="600" fill="#222">${escape(c.title)}</text>`)
  if (c.subtitle !== undefined) out.push(`<text x="10" y="40" font-size="12" fill="#555">${escape(c.subtitle)}</text>`)
  for (const t of y.ticks) {
    const py = y.map(t).toFixed(1)
    out.push(`<line x1="${left}" x2="${right}" y1="${py}" y2="${py}" stroke="#e6e6e6"/>`)
    out.push(
      `<text x="${left - 6}" y="${py}" text-anchor="end" dominant-baseline="middle" fill="#555">${tickLabel(t)}</text>`
    )
  }
  for (const t of xTicks) {
    const px = x.map(t).toFixed(1)
    out.push(`<line x1="${px}" x2="${px}" y1="${bottom}" y2="${bottom + 5}" stroke="#888"/>`)
    out.push(`<text x="${px}" y="${bottom + 18}" text-anchor="middle" fill="#555">${tickLabel(t)}</text>`)
  }
  out.push(`<line x1="${left}" x2="${right}" y1="${bottom}" y2="${bottom}" stroke="#888"/>`)
  out.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${bottom}" stroke="#888"/>`)
  out.push(
    `<text x="${(left + right) / 2}" y="${height - 12}" text-anchor="middle" fill="#333">${escape(c.xLabel)}</text>`
  )
  out.push(
    `<text transform="translate(16 ${(top + bottom) / 2}) rotate(-90)" text-anchor="middle" fill="#333">${
      escape(c.yLabel)
    }</text>`
  )
  if (c.hline !== undefined) {
    const py = y.map(c.hline.y).toFixed(1)
    out.push(`<line x1="${left}" x2="${right}" y1="${py}" y2="${py}" stroke="#c0392b" stroke-dasharray="4 4"/>`)
    out.push(
      `<text x="${right - 4}" y="${Number(py) - 5}" text-anchor="end" fill="#c0392b">${escape(c.hline.label)}</text>`
    )
  }
  c.series.forEach((s, i) => {
    const color = s.color ?? palette[i % palette.length]!
    const pts = s.points.filter((p) => finite(p.y) && (yScale === "linear" || p.y > 0)).sort((a, b) => a.x - b.x)
    const dash = s.dash === undefined ? "" : ` stroke-dasharray="${s.dash}"`
    if (pts.length > 1) {
      const d = pts.map((p, k) => `${k === 0 ? "M" : "L"}${x.map(p.x).toFixed(1)} ${y.map(p.y).toFixed(1)}`).join(" ")
      out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2"${dash}/>`)
    }
    for (const p of pts) {
      const px = x.map(p.x).toFixed(1)
      if (finite(p.min) && finite(p.max) && p.max > p.min && (yScale === "linear" || p.min > 0)) {
        const [y1, y2] = [y.map(p.min).toFixed(1), y.map(p.max).toFixed(1)]
        out.push(`<line x1="${px}" x2="${px}" y1="${y1}" y2="${y2}" stroke="${color}" stroke-width="1.2"/>`)
        out.push(`<line x1="${Number(px) - 3}" x2="${Number(px) + 3}" y1="${y1}" y2="${y1}" stroke="${color}"/>`)
        out.push(`<line x1="${Number(px) - 3}" x2="${Number(px) + 3}" y1="${y2}" y2="${y2}" stroke="${color}"/>`)
      }
      out.push(`<circle cx="${px}" cy="${y.map(p.y).toFixed(1)}" r="3" fill="${color}"/>`)
    }
    const ly = top + 8 + i * 20
    out.push(
      `<line x1="${right + 18}" x2="${right + 42}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"${dash}/>`
    )
    out.push(`<text x="${right + 48}" y="${ly}" dominant-baseline="middle" fill="#333">${escape(s.name)}</text>`)
  })
  out.push(`</svg>`)
  return `${out.join("\n")}\n`
}

/** Horizontal bars, longest first as given, with min-max whiskers and the value after each bar. */
export const barChart = (c: BarChart): string => {
  const width = c.width ?? 760
  const rowHeight = c.bars.some((b) => b.sublabel !== undefined) ? 36 : 26
  const labelWidth = Math.min(
    360,
    12 + Math.max(...c.bars.map((b) => Math.max(b.label.length * 7, (b.sublabel?.length ?? 0) * 5.9)))
  )
  const left = labelWidth + 10
  const right = width - 90
  const top = c.subtitle === undefined ? 40 : 56
  const bottom = top + c.bars.length * rowHeight
  const height = bottom + 45
  const hi = Math.max(1e-9, ...c.bars.flatMap((b) => [b.value, b.max].filter(finite)))
  const ticks = niceTicks(0, hi)
  const end = Math.max(hi, ticks[ticks.length - 1]!)
  const map = (v: number) => left + (v / end) * (right - left)
  const out: Array<string> = []
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ${font} font-size="12">`
  )
  out.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`)
  out.push(`<text x="10" y="22" font-size="15" font-weight="600" fill="#222">${escape(c.title)}</text>`)
  if (c.subtitle !== undefined) out.push(`<text x="10" y="40" font-size="12" fill="#555">${escape(c.subtitle)}</text>`)
  for (const t of ticks) {
    const px = map(t).toFixed(1)
    out.push(`<line x1="${px}" x2="${px}" y1="${top - 4}" y2="${bottom}" stroke="#e6e6e6"/>`)
    out.push(`<text x="${px}" y="${bottom + 16}" text-anchor="middle" fill="#555">${tickLabel(t)}</text>`)
  }
  out.push(
    `<text x="${(left + right) / 2}" y="${height - 10}" text-anchor="middle" fill="#333">${escape(c.unit)}</text>`
  )
  c.bars.forEach((b, i) => {
    const color = b.color ?? palette[i % palette.length]!
    const cy = top + i * rowHeight + rowHeight / 2
    if (b.sublabel === undefined) {
      out.push(
        `<text x="${left - 8}" y="${cy}" text-anchor="end" dominant-baseline="middle" fill="#333">${
          escape(b.label)
        }</text>`
      )
    } else {
      out.push(
        `<text x="${left - 8}" y="${cy - 7}" text-anchor="end" dominant-baseline="middle" fill="#222">${
          escape(b.label)
        }</text>`
      )
      out.push(
        `<text x="${left - 8}" y="${cy + 8}" text-anchor="end" dominant-baseline="middle" font-size="10" fill="#777">${
          escape(b.sublabel)
        }</text>`
      )
    }
    if (finite(b.value)) {
      out.push(
        `<rect x="${left}" y="${cy - 8}" width="${
          Math.max(0, map(b.value) - left).toFixed(1)
        }" height="16" fill="${color}"/>`
      )
    }
    if (finite(b.min) && finite(b.max) && b.max > b.min) {
      const [x1, x2] = [map(b.min).toFixed(1), map(b.max).toFixed(1)]
      out.push(`<line x1="${x1}" x2="${x2}" y1="${cy}" y2="${cy}" stroke="#222"/>`)
      out.push(`<line x1="${x1}" x2="${x1}" y1="${cy - 4}" y2="${cy + 4}" stroke="#222"/>`)
      out.push(`<line x1="${x2}" x2="${x2}" y1="${cy - 4}" y2="${cy + 4}" stroke="#222"/>`)
    }
    const after = Math.max(map(finite(b.value) ? b.value : 0), finite(b.max) ? map(b.max) : 0) + 6
    out.push(
      `<text x="${after.toFixed(1)}" y="${cy}" dominant-baseline="middle" fill="#333">${
        escape(b.note ?? (finite(b.value) ? tickLabel(b.value) : "n/a"))
      }</text>`
    )
  })
  out.push(`</svg>`)
  return `${out.join("\n")}\n`
}
