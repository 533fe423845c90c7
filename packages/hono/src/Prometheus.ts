/**
 * The Effect metrics registry in the Prometheus text exposition format, version 0.0.4: counters,
 * gauges, histograms (`_bucket{le}` cumulative, `+Inf`, `_sum`, `_count`), summaries (`{quantile}`,
 * `_sum`, `_count`) and frequencies (a counter per value, labelled `key`). Metric attributes become
 * labels; names and label names are sanitized to Prometheus' alphabet; every family gets its
 * `# HELP` and `# TYPE` lines.
 * @module
 */
import { Effect, Metric } from "effect"

/** The `Content-Type` of the text format 0.0.4. */
export const contentType = "text/plain; version=0.0.4; charset=utf-8"

/** Options of {@link renderWith}. */
export interface Options {
  /** Prepended to every metric name (e.g. `myapp_`). */
  readonly prefix?: string
  /** Keeps only the metrics for which it returns true (by their Effect id, before sanitizing). */
  readonly filter?: (id: string) => boolean
}

/** A metric or family name: `[a-zA-Z_:][a-zA-Z0-9_:]*`. */
export const sanitizeName = (name: string): string => {
  const s = name.replace(/[^a-zA-Z0-9_:]/g, "_")
  return s === "" ? "_" : /^[0-9]/.test(s) ? `_${s}` : s
}

/** A label name: `[a-zA-Z_][a-zA-Z0-9_]*`; names starting with `__` are reserved by Prometheus. */
export const sanitizeLabel = (name: string): string => {
  let s = name.replace(/[^a-zA-Z0-9_]/g, "_")
  if (s === "" || /^[0-9]/.test(s)) s = `_${s}`
  return s.startsWith("__") ? `x${s}` : s
}

const escapeLabelValue = (value: string) => value.replace(/\\/g, "\\\\").replace(/"/g, "\\\"").replace(/\n/g, "\\n")
const escapeHelp = (text: string) => text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")

/** A sample value: integers and decimals as JS prints them, `NaN`, `+Inf`, `-Inf`. */
export const formatValue = (value: number | bigint): string => {
  if (typeof value === "bigint") return value.toString()
  if (Number.isNaN(value)) return "NaN"
  if (value === Infinity) return "+Inf"
  if (value === -Infinity) return "-Inf"
  return String(value)
}

// Effect's timers record a unit attribute; it describes the metric, not a series, so it is no label.
const skipped = new Set(["unit", "time_unit"])

type Labels = ReadonlyArray<readonly [string, string]>

const labelsOf = (attributes: Metric.Metric.AttributeSet | undefined, reserved: string | undefined): Labels => {
  const out: Array<readonly [string, string]> = []
  const seen = new Set<string>()
  for (const [key, value] of Object.entries(attributes ?? {})) {
    if (skipped.has(key)) continue
    let name = sanitizeLabel(key)
    // A user label named like the one the format adds (le, quantile) would make the series ambiguous.
    if (name === reserved) name = `exported_${name}`
    if (seen.has(name)) continue
    seen.add(name)
    out.push([name, String(value)])
  }
  return out
}

const renderLabels = (labels: Labels, extra?: readonly [string, string]): string => {
  const all = extra === undefined ? labels : [...labels, extra]
  return all.length === 0 ? "" : `{${all.map(([k, v]) => `${k}="${escapeLabelValue(v)}"`).join(",")}}`
}

const typeOf = (type: Metric.Metric.Snapshot["type"]): string => {
  switch (type) {
    case "Counter":
    case "Frequency":
      return "counter"
    case "Gauge":
      return "gauge"
    case "Histogram":
      return "histogram"
    case "Summary":
      return "summary"
  }
}

const samples = (name: string, snapshot: Metric.Metric.Snapshot): Array<string> => {
  switch (snapshot.type) {
    case "Counter":
      return [`${name}${renderLabels(labelsOf(snapshot.attributes, undefined))} ${formatValue(snapshot.state.count)}`]
    case "Gauge":
      return [`${name}${renderLabels(labelsOf(snapshot.attributes, undefined))} ${formatValue(snapshot.state.value)}`]
    case "Frequency": {
      const labels = labelsOf(snapshot.attributes, "key")
      return [...snapshot.state.occurrences].map(([key, n]) => `${name}${renderLabels(labels, ["key", key])} ${formatValue(n)}`)
    }
    case "Histogram": {
      const labels = labelsOf(snapshot.attributes, "le")
      const { buckets, count, sum } = snapshot.state
      const lines = buckets
        .filter(([boundary]) => Number.isFinite(boundary))
        .map(([boundary, cumulative]) => `${name}_bucket${renderLabels(labels, ["le", formatValue(boundary)])} ${formatValue(cumulative)}`)
      lines.push(`${name}_bucket${renderLabels(labels, ["le", "+Inf"])} ${formatValue(count)}`)
      lines.push(`${name}_sum${renderLabels(labels)} ${formatValue(sum)}`)
      lines.push(`${name}_count${renderLabels(labels)} ${formatValue(count)}`)
      return lines
    }
    case "Summary": {
      const labels = labelsOf(snapshot.attributes, "quantile")
      const { count, quantiles, sum } = snapshot.state
      const lines = quantiles.flatMap(([q, v]) => v === undefined ? [] : [`${name}${renderLabels(labels, ["quantile", formatValue(q)])} ${formatValue(v)}`])
      lines.push(`${name}_sum${renderLabels(labels)} ${formatValue(sum)}`)
      lines.push(`${name}_count${renderLabels(labels)} ${formatValue(count)}`)
      return lines
    }
  }
}

/**
 * Formats snapshots (e.g. `Metric.snapshot`'s). Families are sorted by name; series keep their
 * registration order. A series whose sanitized name collides with a family of another type is left
 * out (a scraper would reject the whole page).
 */
export const format = (snapshots: ReadonlyArray<Metric.Metric.Snapshot>, options: Options = {}): string => {
  const prefix = options.prefix === undefined ? "" : options.prefix
  const families = new Map<string, { type: string; help: string; series: Array<Metric.Metric.Snapshot> }>()
  for (const snapshot of snapshots) {
    if (options.filter !== undefined && !options.filter(snapshot.id)) continue
    const name = sanitizeName(prefix + snapshot.id)
    const type = typeOf(snapshot.type)
    const family = families.get(name)
    if (family === undefined) {
      families.set(name, { type, help: snapshot.description ?? snapshot.id, series: [snapshot] })
    } else if (family.type === type) {
      family.series.push(snapshot)
    }
  }
  const lines: Array<string> = []
  for (const name of [...families.keys()].sort()) {
    const family = families.get(name)!
    lines.push(`# HELP ${name} ${escapeHelp(family.help)}`)
    lines.push(`# TYPE ${name} ${family.type}`)
    const seen = new Set<string>()
    for (const snapshot of family.series) {
      for (const line of samples(name, snapshot)) {
        // Two Effect ids sanitized to one name with equal labels: keep the first series.
        const key = line.slice(0, line.lastIndexOf(" "))
        if (seen.has(key)) continue
        seen.add(key)
        lines.push(line)
      }
    }
  }
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`
}

/** The current registry (the one of the running context) with options. */
export const renderWith = (options: Options = {}): Effect.Effect<string> => Effect.map(Metric.snapshot, (s) => format(s, options))

/** The current registry in the text format. */
export const render: Effect.Effect<string> = renderWith()
