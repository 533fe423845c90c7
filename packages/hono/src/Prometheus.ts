/**
 * The Effect metrics registry in the Prometheus text exposition format, version 0.0.4, rendered by
 * Effect's own `PrometheusMetrics` (effect/observability): counters, gauges, histograms
 * (`_bucket{le}` cumulative, `+Inf`, `_sum`, `_count`), summaries (`{quantile}`, `_sum`, `_count`)
 * and frequencies (a counter per value, labelled `key`). Metric attributes become labels.
 *
 * What this module adds before handing the registry to it, so that a scraper always gets a page it
 * accepts (and the page reads as it did before the switch): families sorted by name, a `# HELP`
 * line for every family (the metric's id when it has no description), a name shared by two metric
 * types kept for the first one only, a series whose name and labels repeat another's left out, and
 * user labels named like the format's own (`le`, `quantile`, `key`) renamed `exported_<name>`.
 * @since 0.1.0
 * @module
 */
import { Context, Effect, Metric } from "effect"
import { PrometheusMetrics } from "effect/observability"

/**
 * The `Content-Type` of the text format 0.0.4.
 * @since 0.1.0
 * @category constants
 */
export const contentType = "text/plain; version=0.0.4; charset=utf-8"

/**
 * Options of {@link renderWith}.
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Prepended to every metric name (e.g. `myapp_`). */
  readonly prefix?: string
  /** Keeps only the metrics for which it returns true (by their Effect id, before sanitizing). */
  readonly filter?: (id: string) => boolean
}

/**
 * A metric or family name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
 * @since 0.1.0
 * @category formatting
 */
export const sanitizeName = (name: string): string => {
  const s = name.replace(/[^a-zA-Z0-9_:]/g, "_")
  return s === "" ? "_" : /^[0-9]/.test(s) ? `_${s}` : s
}

/**
 * A label name: `[a-zA-Z_][a-zA-Z0-9_]*`; names starting with `__` are reserved by Prometheus.
 * @since 0.1.0
 * @category formatting
 */
export const sanitizeLabel = (name: string): string => {
  let s = name.replace(/[^a-zA-Z0-9_]/g, "_")
  if (s === "" || /^[0-9]/.test(s)) s = `_${s}`
  return s.startsWith("__") ? `x${s}` : s
}

const typeOf = (type: Metric.Metric.Snapshot["type"]): string => type === "Frequency" ? "Counter" : type

// The label each type adds to its samples: a user label of that name would make them ambiguous.
const reservedOf = (type: Metric.Metric.Snapshot["type"]): string | undefined =>
  type === "Histogram" ? "le" : type === "Summary" ? "quantile" : type === "Frequency" ? "key" : undefined

// Effect's timers record a unit attribute; it describes the metric, not a series, so it is no label.
const skipped = new Set(["unit", "time_unit"])

const labelsOf = (snapshot: Metric.Metric.Snapshot): Record<string, string> => {
  const out: Record<string, string> = {}
  const reserved = reservedOf(snapshot.type)
  for (const [key, value] of Object.entries(snapshot.attributes ?? {})) {
    if (skipped.has(key)) continue
    let name = sanitizeLabel(key)
    if (name === reserved) name = `exported_${name}`
    if (name in out) continue
    out[name] = String(value)
  }
  return out
}

/**
 * The registry Effect's formatter reads: one entry per series to show, in the order to show them,
 * each answering with the state it had in `snapshots`.
 */
const registryOf = (snapshots: ReadonlyArray<Metric.Metric.Snapshot>, options: Options): Metric.MetricRegistry => {
  const prefix = options.prefix ?? ""
  const families = new Map<
    string,
    { readonly type: string; readonly series: Array<Metric.Metric.Metadata<any, any>> }
  >()
  const seen = new Set<string>()
  for (const snapshot of snapshots) {
    if (options.filter !== undefined && !options.filter(snapshot.id)) continue
    const name = sanitizeName(prefix + snapshot.id)
    const type = typeOf(snapshot.type)
    const family = families.get(name) ?? { type, series: [] }
    // A name already used by another type would make a scraper reject the whole page.
    if (family.type !== type) continue
    families.set(name, family)
    const attributes = labelsOf(snapshot)
    const key = `${name}${JSON.stringify(attributes)}`
    // Two ids sanitized to one name with equal labels: keep the first series.
    if (seen.has(key)) continue
    seen.add(key)
    const state = snapshot.state
    family.series.push({
      id: name,
      type: snapshot.type,
      description: snapshot.description ?? snapshot.id,
      attributes,
      hooks: { get: () => state, update: () => undefined, modify: () => undefined }
    } as Metric.Metric.Metadata<any, any>)
  }
  const registry: Metric.MetricRegistry = new Map()
  for (const name of [...families.keys()].sort()) {
    families.get(name)!.series.forEach((series, i) => registry.set(`${name}#${i}`, series))
  }
  return registry
}

/**
 * Formats snapshots (e.g. `Metric.snapshot`'s) with Effect's `PrometheusMetrics`.
 * @since 0.1.0
 * @category formatting
 */
export const format = (snapshots: ReadonlyArray<Metric.Metric.Snapshot>, options: Options = {}): string =>
  PrometheusMetrics.formatUnsafe(Context.make(Metric.MetricRegistry, registryOf(snapshots, options)))

/**
 * The current registry (the one of the running context) with options.
 * @since 0.1.0
 * @category formatting
 */
export const renderWith = (options: Options = {}): Effect.Effect<string> =>
  Effect.map(Metric.snapshot, (s) => format(s, options))

/**
 * The current registry in the text format.
 * @since 0.1.0
 * @category formatting
 */
export const render: Effect.Effect<string> = renderWith()
