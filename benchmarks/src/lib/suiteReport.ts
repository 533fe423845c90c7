/**
 * The suite's results (the JSON written to `benchmarks/results/`), the targets checked against
 * them, and the Markdown report with its SVG charts. Pure functions of the results, so that a
 * report can be regenerated from a JSON file and tested without a database.
 * @module
 */
import { logMarkdown, type LogSection, logTargets } from "./logReport.ts"
import type { Machine } from "./machine.ts"
import type { Summary } from "./stats.ts"
import { barChart, lineChart, type Series } from "./svg.ts"

/** The systems of the claim comparison, as keys of `claim.best`. */
export const systems = [
  "tidings-unordered",
  "tidings-per-key",
  "tidings-log",
  "ceiling",
  "sql-loop",
  "graphile-worker",
  "pg-boss"
] as const
export type System = (typeof systems)[number]
/** Measured beside them, outside `claim.best`: the Tidings relay with synchronous bookkeeping commits. */
export type Variant = "tidings-unordered-sync"

/** One configuration of one system in the claim comparison: the median of its runs. */
export interface ClaimRow {
  readonly system: System | Variant
  /** Human-readable settings, e.g. `relays 4, batch 100`. */
  readonly config: string
  readonly relays?: number
  readonly batch?: number
  readonly eventsPerSecond: Summary
  /** Some run hit the time cap before its table was empty (its rate is over the events done). */
  readonly capped: boolean
  /** Over all runs: events handled twice, and events lost (not done, or wrong in the table). */
  readonly duplicates: number
  readonly lost: number
}

export interface ClaimSection {
  readonly events: number
  readonly capSeconds: number
  readonly rows: ReadonlyArray<ClaimRow>
  /** Each system's best median events/s in this run. */
  readonly best: Readonly<Record<System, number>>
  /** The configuration behind each best, with its range. */
  readonly bestOf: Readonly<Record<string, { readonly config: string; readonly min: number; readonly max: number }>>
  /** Best medians of variants (not systems of their own). */
  readonly variants: Readonly<Partial<Record<Variant, number>>>
}

/** One paced latency measurement (median over runs of each percentile). */
export interface LatencyRow {
  /** `tidings` or `graphile-worker`. */
  readonly system: string
  /** `notify`, `listen`, `poll` (Tidings wake-ups) or `add→start` (graphile-worker). */
  readonly mode: string
  /** `memory` (in-memory broker), `rabbitmq` (classic queue) or `postgres` (graphile-worker). */
  readonly transport: string
  /** What the latency ends at: `publish`, `confirm`, `consumer` or `start`. */
  readonly target: string
  readonly rate: number
  readonly p50: Summary
  readonly p95: Summary
  readonly p99: Summary
  readonly max: Summary
  readonly achievedRate: Summary
  readonly events: number
  readonly lost: number
  readonly duplicates: number
}

export interface LatencySection {
  readonly durationSeconds: number
  readonly warmupSeconds: number
  readonly relays: number
  readonly producers: number
  readonly batch: number
  /** The graphile-worker settings of the add → start runs. */
  readonly graphile: string
  readonly rows: ReadonlyArray<LatencyRow>
  /** Why RabbitMQ runs are missing, when they are. */
  readonly rabbitmq?: string
}

/** A table state of the bloat runs. */
export type BloatState = "clean" | "bloated" | "after-retention"

export interface BloatSection {
  /** Published rows awaiting retention in the bloated table. */
  readonly rows: number
  readonly seedSeconds: number
  readonly tableSizeMiB: { readonly bloated: number; readonly afterRetention: number }
  readonly prune: { readonly rows: number; readonly seconds: number; readonly batch: number }
  readonly vacuumSeconds: number
  readonly relays: number
  readonly batch: number
  readonly events: number
  readonly rate: number
  readonly throughput: Readonly<Record<BloatState, Summary>>
  readonly latency: Readonly<
    Record<BloatState, { readonly p50: Summary; readonly p95: Summary; readonly p99: Summary }>
  >
  readonly lost: number
  readonly duplicates: number
}

export interface ScaleRow {
  readonly processes: number
  readonly eventsPerSecond: Summary
  readonly duplicates: number
  readonly lost: number
  /** Events published by each process, in the last run. */
  readonly perProcess: ReadonlyArray<number>
}

export interface ScaleSection {
  readonly relaysPerProcess: number
  readonly batch: number
  readonly events: number
  readonly rows: ReadonlyArray<ScaleRow>
}

export interface Target {
  readonly id: string
  readonly description: string
  readonly goal: string
  readonly actual: string
  /** `null`: not measured in this run. */
  readonly met: boolean | null
}

export interface SuiteResult {
  readonly version: 1
  /** ISO time the run started. */
  readonly date: string
  readonly quick: boolean
  /** Runs behind every figure. */
  readonly runs: number
  readonly command: string
  readonly durationSeconds: number
  readonly machine: Machine & {
    readonly postgres: string
    readonly fsync: string
    readonly synchronousCommit: string
    readonly rabbitmq?: string
    readonly loadAverage: { readonly start: ReadonlyArray<number>; readonly end: ReadonlyArray<number> }
  }
  readonly claim?: ClaimSection
  readonly latency?: LatencySection
  readonly bloat?: BloatSection
  readonly scaleOut?: ScaleSection
  /** Log mode: latency, scale-out, consumers, retention, end to end (its claim runs are in `claim`). */
  readonly log?: LogSection
  readonly targets: ReadonlyArray<Target>
  /** Verification failures (lost or duplicated events, failed runs); empty when all was well. */
  readonly problems: ReadonlyArray<string>
}

// ---------------------------------------------------------------------------------------------
// Targets

const ratio = (
  a: number | undefined,
  b: number | undefined
) => (a !== undefined && b !== undefined && b > 0 ? a / b : Number.NaN)
const x = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}×` : "n/a")
const pct = (n: number) => (Number.isFinite(n) ? `${n >= 0 ? "+" : ""}${(n * 100).toFixed(0)}%` : "n/a")

/** The latency row of Tidings at `rate` with `mode`, publish target. */
const tidingsLatency = (l: LatencySection | undefined, mode: string, rate: number) =>
  l?.rows.find((r) => r.system === "tidings" && r.mode === mode && r.transport === "memory" && r.rate === rate)

/** The targets of the issue, checked against `r` (everything but `targets` itself). */
export const targets = (r: Omit<SuiteResult, "targets">): Array<Target> => {
  const out: Array<Target> = []
  const c = r.claim
  const g = ratio(c?.best["tidings-unordered"], c?.best["graphile-worker"])
  const b = ratio(c?.best["tidings-unordered"], c?.best["pg-boss"])
  out.push({
    id: "claim-vs-graphile-worker",
    description: "Tidings unordered claim throughput vs graphile-worker's best (same run)",
    goal: "≥ 1.50×",
    actual: c === undefined ? "not measured" : x(g),
    met: c === undefined ? null : g >= 1.5
  })
  out.push({
    id: "claim-vs-pg-boss",
    description: "Tidings unordered claim throughput vs pg-boss's best (same run)",
    goal: "≥ 3.00×",
    actual: c === undefined ? "not measured" : x(b),
    met: c === undefined ? null : b >= 3
  })
  for (
    const [mode, what] of [["notify", "relays in the producers' process (in-process wake-up, NOTIFY sent)"], [
      "listen",
      "NOTIFY only (relays as in another process)"
    ]] as const
  ) {
    const row = tidingsLatency(r.latency, mode, 1_000)
    out.push({
      id: `latency-p99-${mode}`,
      description: `commit → publish p99 at 1,000 events/s, ${what}`,
      goal: "< 15 ms",
      actual: row === undefined ? "not measured" : `${row.p99.median} ms (runs ${row.p99.min}-${row.p99.max})`,
      met: row === undefined ? null : row.p99.median < 15
    })
  }
  for (const state of ["bloated", "after-retention"] as const) {
    const bl = r.bloat
    const thr = bl === undefined ? Number.NaN : ratio(bl.throughput[state].median, bl.throughput.clean.median) - 1
    const lat = bl === undefined ? Number.NaN : ratio(bl.latency[state].p50.median, bl.latency.clean.p50.median) - 1
    // Sub-millisecond medians move by a few tenths of a millisecond from run to run: a latency
    // within 0.5 ms of the clean table's counts as not slower.
    const latOk = bl === undefined
      ? false
      : lat <= 0.2 || bl.latency[state].p50.median - bl.latency.clean.p50.median <= 0.5
    out.push({
      id: `bloat-${state}`,
      description: state === "bloated"
        ? `throughput and p50 latency with ${
          bl === undefined ? "1,000,000" : bl.rows.toLocaleString("en-US")
        } published rows awaiting retention, vs a clean table`
        : "throughput and p50 latency after retention pruned them, vs a clean table",
      goal: "≤ 20% slower (p50 latency: or within 0.5 ms)",
      actual: bl === undefined
        ? "not measured"
        : `throughput ${pct(thr)}, p50 latency ${pct(lat)} (${
          bl.latency[state].p50.median
        } vs ${bl.latency.clean.p50.median} ms)`,
      met: bl === undefined ? null : thr >= -0.2 && latOk
    })
  }
  const s = r.scaleOut
  const one = s?.rows.find((row) => row.processes === 1)?.eventsPerSecond.median
  const most = s?.rows.reduce((a, row) => (row.processes > a.processes ? row : a), s.rows[0]!)
  const held = ratio(most?.eventsPerSecond.median, one)
  const dupes = s?.rows.reduce((n, row) => n + row.duplicates + row.lost, 0) ?? 0
  out.push({
    id: "scale-out",
    description: `${
      most?.processes ?? 4
    } relay processes on one table: throughput vs 1 process, and no event published twice`,
    goal: "≥ 80% of 1 process, 0 duplicates",
    actual: s === undefined ? "not measured" : `${pct(held - 1)} vs 1 process, ${dupes} duplicates or lost`,
    met: s === undefined ? null : held >= 0.8 && dupes === 0
  })
  out.push(
    ...logTargets({
      ...(r.claim === undefined ? {} : { best: r.claim.best }),
      ...(r.log === undefined ? {} : { log: r.log })
    })
  )
  if (r.quick) {
    out.push({
      id: "quick-duration",
      description: "`npm run bench -- --quick` wall time",
      goal: "< 3 min",
      actual: `${(r.durationSeconds / 60).toFixed(1)} min`,
      met: r.durationSeconds < 180
    })
  }
  out.push({
    id: "no-loss",
    description: "every event/job of every run done exactly once",
    goal: "0 problems",
    actual: `${r.problems.length} problems`,
    met: r.problems.length === 0
  })
  return out
}

// ---------------------------------------------------------------------------------------------
// Charts

/** Chart files of a result: name → SVG text. */
export const charts = (r: SuiteResult): Record<string, string> => {
  const out: Record<string, string> = {}
  const c = r.claim
  if (c !== undefined) {
    for (const system of ["tidings-unordered", "tidings-per-key", "tidings-log", "sql-loop"] as const) {
      const rows = c.rows.filter((row) => row.system === system && row.relays !== undefined && row.batch !== undefined)
      if (rows.length === 0) continue
      const batches = [...new Set(rows.map((row) => row.batch!))].sort((a, b) => a - b)
      const series: Array<Series> = batches.map((batch) => ({
        name: `batch ${batch}`,
        points: rows.filter((row) => row.batch === batch).map((row) => ({
          x: row.relays!,
          y: row.eventsPerSecond.median,
          min: row.eventsPerSecond.min,
          max: row.eventsPerSecond.max
        }))
      }))
      const peers: Array<Series> = (["graphile-worker", "pg-boss", "ceiling"] as const).flatMap((p, i) => {
        const best = c.best[p]
        if (!(best > 0)) return []
        const xs = [...new Set(rows.map((row) => row.relays!))]
        return [{
          name: `${p} best`,
          color: ["#7f7f7f", "#bcbd22", "#222222"][i]!,
          dash: "5 4",
          points: [Math.min(...xs), Math.max(...xs)].map((x) => ({ x, y: best }))
        }]
      })
      out[`claim-${system}`] = lineChart({
        title: `${system}: claim throughput vs relays, per batch size`,
        subtitle:
          `events claimed and marked per second, median of ${r.runs} runs (whiskers: min-max); dashed: other systems' best`,
        xLabel: "relays (concurrent pollers)",
        yLabel: "events/s",
        xScale: "log",
        series: [...series, ...peers],
        xTicks: [...new Set(rows.map((row) => row.relays!))].sort((a, b) => a - b)
      })
    }
    const bars = [...systems].map((system) => ({ system, best: c.best[system], range: c.bestOf[system] }))
      .filter((b) => b.best > 0)
      .sort((a, b) => b.best - a.best)
    out["claim-best"] = barChart({
      title: "Best claim throughput per system",
      subtitle: `${
        c.events.toLocaleString("en-US")
      } rows per run; each system's best configuration, median of ${r.runs} runs (whiskers: min-max)`,
      unit: "events/s",
      bars: bars.map((b) => ({
        label: b.system,
        ...(b.range === undefined ? {} : { sublabel: b.range.config }),
        value: b.best,
        ...(b.range === undefined ? {} : { min: b.range.min, max: b.range.max }),
        color: b.system.startsWith("tidings")
          ? "#4e79a7"
          : b.system === "ceiling" || b.system === "sql-loop"
          ? "#bab0ac"
          : "#f28e2b"
      }))
    })
  }
  const l = r.latency
  if (l !== undefined) {
    const lines = new Map<string, Array<LatencyRow>>()
    for (const row of l.rows.filter((row) => row.transport !== "rabbitmq")) {
      const key = `${row.system} ${row.mode}`
      lines.set(key, [...(lines.get(key) ?? []), row])
    }
    const series: Array<Series> = []
    let i = 0
    for (const [name, rows] of lines) {
      const color = ["#4e79a7", "#59a14f", "#e15759", "#f28e2b", "#76b7b2"][i++ % 5]!
      for (const [q, dash] of [["p50", "2 3"], ["p99", undefined]] as const) {
        series.push({
          name: `${name} ${q}`,
          color,
          ...(dash === undefined ? {} : { dash }),
          points: rows.map((row) => ({ x: row.rate, y: row[q].median, min: row[q].min, max: row[q].max }))
        })
      }
    }
    out["latency"] = lineChart({
      title: "Latency vs paced load",
      subtitle:
        `Tidings commit → publish, graphile-worker add → start; dotted p50, solid p99; median of ${r.runs} runs (whiskers: min-max)`,
      xLabel: "paced load (events/s)",
      yLabel: "milliseconds (log scale)",
      yScale: "log",
      series,
      hline: { y: 15, label: "15 ms target (p99 at 1,000/s)" },
      width: 860
    })
  }
  const s = r.scaleOut
  if (s !== undefined) {
    out["scale-out"] = barChart({
      title: "Scale-out: relay processes on one table",
      subtitle: `${s.relaysPerProcess} relays per process, batch ${s.batch}, ${
        s.events.toLocaleString("en-US")
      } events; median of ${r.runs} runs (whiskers: min-max)`,
      unit: "events/s (all processes together)",
      bars: s.rows.map((row) => ({
        label: `${row.processes} process${row.processes === 1 ? "" : "es"}`,
        value: row.eventsPerSecond.median,
        min: row.eventsPerSecond.min,
        max: row.eventsPerSecond.max
      }))
    })
  }
  const bl = r.bloat
  if (bl !== undefined) {
    const states = ["clean", "bloated", "after-retention"] as const
    out["bloat"] = barChart({
      title: `Throughput with ${bl.rows.toLocaleString("en-US")} published rows awaiting retention`,
      subtitle: `clean table, the bloated one, and after retention; median of ${r.runs} runs (whiskers: min-max)`,
      unit: `events/s (relays ${bl.relays}, batch ${bl.batch})`,
      bars: states.map((st) => ({
        label: st,
        value: bl.throughput[st].median,
        min: bl.throughput[st].min,
        max: bl.throughput[st].max
      }))
    })
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Markdown

const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "n/a")
const fmtMs = (
  n: number
) => (!Number.isFinite(n) ? "n/a" : n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : n.toFixed(0))
const range = (s: Summary, f: (n: number) => string) => `${f(s.min)}–${f(s.max)}`
/** A Markdown table: the first `text` columns left-aligned, the rest (numbers) right-aligned. */
const mdTable = (headers: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>, text = 1) =>
  [
    `| ${headers.join(" | ")} |`,
    `|${headers.map((_, i) => (i < text ? "---" : "---:")).join("|")}|`,
    ...rows.map((r) => `| ${r.join(" | ")} |`)
  ].join("\n")
const mark = (met: boolean | null) => (met === null ? "not measured" : met ? "**met**" : "**not met**")

/**
 * The Markdown report. `chartPath(name)` is where the page finds chart `name` (relative to the
 * page: `2025-01-31-claim-best.svg` next to the report, `results/…` from the README).
 */
export const markdown = (r: SuiteResult, chartPath: (name: string) => string): string => {
  const m = r.machine
  const available = new Set(Object.keys(charts(r)))
  const img = (name: string, alt: string) => (available.has(name) ? `![${alt}](${chartPath(name)})\n` : "")
  const out: Array<string> = []
  /** A `###` section: its title, then its introduction when it has one. */
  const section = (title: string, intro?: string) =>
    out.push("", `### ${title}`, "", ...(intro === undefined ? [] : [intro, ""]))
  out.push(
    `Run of ${r.date.slice(0, 16).replace("T", " ")} UTC${
      r.quick ? " (**--quick**: small counts, for checking that everything works; not for comparing)" : ""
    }: \`${r.command}\`, ${
      (r.durationSeconds / 60).toFixed(1)
    } min. Every figure is the **median of ${r.runs} runs** with the min–max of those runs.`
  )
  out.push("")
  out.push(mdTable(["machine", ""], [
    ["CPU", `${m.cpus} cores, ${m.cpuModel}`],
    ["memory", `${m.memoryGiB} GiB`],
    ["OS", m.os],
    ["PostgreSQL", `${m.postgres} (embedded, fsync=${m.fsync}, synchronous_commit=${m.synchronousCommit})`],
    ...(m.rabbitmq === undefined ? [] : [["RabbitMQ", m.rabbitmq]]),
    ["Node.js", m.node],
    [
      "load average (1/5/15 min)",
      `${m.loadAverage.start.join(" / ")} at start, ${m.loadAverage.end.join(" / ")} at end`
    ]
  ], 2))
  out.push("")
  out.push(
    `> **Figures from different machines don't compare.** They depend on cores, disk (every commit waits for an fsync) and whatever else runs: a load average near or above the number of cores (${m.cpus}) means other work shared the machine. Compare systems within one run.`
  )
  section("Targets")
  out.push(
    mdTable(["target", "goal", "this run", ""], r.targets.map((t) => [t.description, t.goal, t.actual, mark(t.met)]), 4)
  )
  if (r.problems.length > 0) {
    out.push("")
    out.push("**Problems found while checking the runs:**")
    out.push("")
    for (const p of r.problems) out.push(`- ${p}`)
  }

  const c = r.claim
  if (c !== undefined) {
    section(
      "Claim throughput",
      `Every run drains a fresh table (or queue) of **${
        fmtInt(c.events)
      } rows** with the same ~250-byte JSON payload; events/s = rows claimed and marked done ÷ time from starting the workers until the last is done. Handlers and publishers do nothing (Tidings publishes to the in-memory broker). Runs capped at ${c.capSeconds} s count the rows done by then (marked *). The Tidings relay commits its own claims and settles without waiting for the WAL flush (\`bookkeepingCommit: "async"\`, its default); graphile-worker and pg-boss wait on every statement: \`tidings-unordered-sync\` is Tidings waiting too.`
    )
    const tidings = c.best["tidings-unordered"]
    const bestRange = (key: string) => {
      const best = c.bestOf[key]
      return best === undefined ? "—" : `${fmtInt(best.min)}–${fmtInt(best.max)}`
    }
    out.push(
      mdTable(
        ["system", "best configuration", "events/s (median)", "min–max", "vs tidings-unordered"],
        [...systems].map((
          s
        ) => [
          s,
          c.bestOf[s]?.config ?? "—",
          fmtInt(c.best[s]),
          bestRange(s),
          tidings > 0 && c.best[s] > 0 ? `${(c.best[s] / tidings).toFixed(2)}×` : "—"
        ])
          .concat(
            Object.entries(c.variants).map((
              [v, n]
            ) => [
              `${v} (variant)`,
              c.bestOf[v]?.config ?? "—",
              fmtInt(n!),
              bestRange(v),
              tidings > 0 ? `${(n! / tidings).toFixed(2)}×` : "—"
            ])
          ),
        2
      )
    )
    out.push("")
    out.push(img("claim-best", "best claim throughput per system"))
    for (const system of ["tidings-unordered", "tidings-per-key", "tidings-log", "sql-loop"]) {
      out.push(img(`claim-${system}`, `${system} throughput vs relays per batch size`))
    }
    out.push("<details><summary>Every configuration</summary>")
    out.push("")
    out.push(
      mdTable(
        ["system", "configuration", "events/s (median)", "min–max", "dup", "lost"],
        c.rows.map((
          row
        ) => [
          row.system,
          row.config,
          `${fmtInt(row.eventsPerSecond.median)}${row.capped ? "*" : ""}`,
          range(row.eventsPerSecond, fmtInt),
          String(row.duplicates),
          String(row.lost)
        ]),
        2
      )
    )
    out.push("")
    out.push("</details>")
  }

  const l = r.latency
  if (l !== undefined) {
    section(
      "Publish latency",
      `Producers append one event per transaction on a fixed schedule (${l.producers} producer fibers; ${l.warmupSeconds} s warm-up, then ${l.durationSeconds} s measured); ${l.relays} relays (batch ${l.batch}) publish. Latency per event from its \`COMMIT\` returning to: the in-memory broker's publish returning (\`publish\`), RabbitMQ's confirm (\`confirm\`) or an \`AmqpConsumer\` handler (\`consumer\`). Wake-ups: \`notify\` = store with \`notify: true\`, relays in the producers' process (woken in-process after commit; the NOTIFY goes to other processes); \`listen\` = relays woken only by the NOTIFY, as in another process; \`poll\` = no wake-up, adaptive polling only. graphile-worker (${l.graphile}): \`addJob\` returned → task handler started.`
    )
    out.push(
      mdTable(
        ["system", "wake-up", "target", "rate/s", "achieved/s", "p50 ms", "p95 ms", "p99 ms", "p99 min–max", "max ms"],
        l.rows.map((row) => [
          row.transport === "rabbitmq" ? `${row.system} (RabbitMQ classic)` : row.system,
          row.mode,
          row.target,
          fmtInt(row.rate),
          fmtInt(row.achievedRate.median),
          fmtMs(row.p50.median),
          fmtMs(row.p95.median),
          fmtMs(row.p99.median),
          range(row.p99, fmtMs),
          fmtMs(row.max.median)
        ]),
        3
      )
    )
    if (l.rabbitmq !== undefined) out.push(`\nRabbitMQ: ${l.rabbitmq}`)
    out.push("")
    out.push(img("latency", "latency percentiles vs load"))
  }

  const bl = r.bloat
  if (bl !== undefined) {
    section(
      "Bloat: published rows awaiting retention",
      `The same table, first with **${fmtInt(bl.rows)} published rows** (inserted in ${
        bl.seedSeconds.toFixed(1)
      } s, then \`VACUUM ANALYZE\`; ${bl.tableSizeMiB.bloated} MiB), then after retention deleted them (\`OutboxStore.prune\`, ${
        fmtInt(bl.prune.batch)
      } per statement: ${fmtInt(bl.prune.rows)} rows in ${bl.prune.seconds.toFixed(1)} s) and a \`VACUUM\` (${
        bl.vacuumSeconds.toFixed(1)
      } s, as autovacuum would; ${bl.tableSizeMiB.afterRetention} MiB), against a fresh table. Throughput: ${
        fmtInt(bl.events)
      } pending events drained by ${bl.relays} relays, batch ${bl.batch}. Latency: ${
        fmtInt(bl.rate)
      } events/s paced, \`notify\`.`
    )
    const states = ["clean", "bloated", "after-retention"] as const
    const base = bl.throughput.clean.median
    const baseP50 = bl.latency.clean.p50.median
    out.push(
      mdTable(
        ["table", "events/s", "min–max", "vs clean", "p50 ms", "p95 ms", "p99 ms", "p50 vs clean"],
        states.map((st) => [
          st,
          fmtInt(bl.throughput[st].median),
          range(bl.throughput[st], fmtInt),
          st === "clean" ? "" : pct(bl.throughput[st].median / base - 1),
          fmtMs(bl.latency[st].p50.median),
          fmtMs(bl.latency[st].p95.median),
          fmtMs(bl.latency[st].p99.median),
          st === "clean" ? "" : pct(bl.latency[st].p50.median / baseP50 - 1)
        ])
      )
    )
    out.push("")
    out.push(img("bloat", "throughput with and without bloat"))
  }

  const s = r.scaleOut
  if (s !== undefined) {
    section(
      "Scale-out",
      `1 to ${
        Math.max(...s.rows.map((row) => row.processes))
      } Node processes, each running \`Relay.layer\` (${s.relaysPerProcess} relays, batch ${s.batch}) with its own pool, drain one table of ${
        fmtInt(s.events)
      } events together. Each process reports every id it published; duplicates count ids published more than once across all processes.`
    )
    const one = s.rows.find((row) => row.processes === 1)?.eventsPerSecond.median
    out.push(
      mdTable(
        ["processes", "events/s", "min–max", "vs 1 process", "duplicates", "lost", "events per process (last run)"],
        s.rows.map((row) => [
          String(row.processes),
          fmtInt(row.eventsPerSecond.median),
          range(row.eventsPerSecond, fmtInt),
          one === undefined ? "" : pct(row.eventsPerSecond.median / one - 1),
          String(row.duplicates),
          String(row.lost),
          row.perProcess.map(fmtInt).join(" / ")
        ])
      )
    )
    out.push("")
    out.push(img("scale-out", "scale-out throughput"))
  }
  out.push(logMarkdown(r.log, r.runs))
  return `${out.join("\n").replace(/\n{3,}/g, "\n\n")}\n`
}

/** Replaces what lies between `start` and `end` markers in `page` (appending both when missing). */
export const replaceBetween = (page: string, start: string, end: string, body: string): string => {
  const i = page.indexOf(start)
  const j = page.indexOf(end)
  if (i < 0 || j < i) return `${page.trimEnd()}\n\n${start}\n${body}${end}\n`
  return `${page.slice(0, i + start.length)}\n${body}${page.slice(j)}`
}
