/**
 * Log mode's part of the suite's results: its section of the JSON, its targets and its Markdown.
 * Pure functions of the results (tested without a database, like the rest of the report).
 * @module
 */
import type { Summary } from "./stats.ts"

/** A paced latency figure (median over runs of each percentile). */
export interface LogLatencyRow {
  /** `tidings-log` (relay in another process / in the producers' process) or `direct` (the dual-write floor). */
  readonly system: string
  readonly transport: "memory" | "rabbitmq"
  readonly target: "publish" | "confirm"
  readonly rate: number
  readonly p50: Summary
  readonly p99: Summary
  readonly achievedRate: Summary
  readonly lost: number
  readonly duplicates: number
  /** CPU time of the reading process per event (relay or bare reader in another process), µs. */
  readonly readerCpuUsPerEvent?: Summary
}

/** A scale-out figure of log relay processes. */
export interface LogScaleRow {
  readonly processes: number
  readonly eventsPerSecond: Summary
  readonly duplicates: number
  readonly lost: number
  readonly perProcess: ReadonlyArray<number>
}

/** The e2e row of raw amqplib publishing the same messages from memory: the broker's ceiling, not a peer. */
export const rawAmqplib = "raw-amqplib"

/** A backlog moved into RabbitMQ by one system (its best configuration). */
export interface E2eRow {
  readonly system: string
  readonly config: string
  readonly eventsPerSecond: Summary
  readonly lost: number
  readonly duplicates: number
}

/** A paced run into RabbitMQ (log mode): commit → confirm. */
export interface E2ePacedRow {
  readonly rate: number
  readonly achievedRate: Summary
  readonly p50: Summary
  readonly p99: Summary
  /** The broker alone at the same rate (raw amqplib from memory, no database): publish → confirm p99. */
  readonly brokerP99?: Summary
}

export interface LogSection {
  readonly partitions: number
  /** Commit → publish (relay in another process) and commit → confirm (RabbitMQ) beside the dual-write floor. */
  readonly latency?: ReadonlyArray<LogLatencyRow>
  readonly scale?: {
    readonly workersPerProcess: number
    readonly batch: number
    readonly events: number
    readonly rows: ReadonlyArray<LogScaleRow>
  }
  readonly consumer?: {
    readonly events: number
    readonly log: Summary
    readonly inbox: Summary
    readonly inboxConfig: string
    readonly lost: number
    readonly duplicates: number
  }
  readonly retention?: { readonly rows: number; readonly seconds: number; readonly batch: number }
  readonly e2e?: {
    readonly events: number
    readonly rows: ReadonlyArray<E2eRow>
    readonly paced: ReadonlyArray<E2ePacedRow>
    /** Producers alone (no relay), events/s, at 10 events per transaction. */
    readonly producerLimit: Summary
    readonly txEvents: number
  }
}

/** What the log targets read of the rest of the results. */
export interface LogInputs {
  readonly best?: Readonly<Record<string, number>>
  readonly log?: LogSection
}

export interface LogTarget {
  readonly id: string
  readonly description: string
  readonly goal: string
  readonly actual: string
  readonly met: boolean | null
}

const ratio = (
  a: number | undefined,
  b: number | undefined
) => (a !== undefined && b !== undefined && b > 0 ? a / b : Number.NaN)
const x = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}×` : "n/a")
const pct = (n: number) => (Number.isFinite(n) ? `${(n * 100).toFixed(0)}%` : "n/a")
const int = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "n/a")

/** The issue's log mode targets. */
export const logTargets = (r: LogInputs): Array<LogTarget> => {
  const out: Array<LogTarget> = []
  const b = r.best
  const claimed = b !== undefined && (b["tidings-log"] ?? 0) > 0
  const vs = (id: string, description: string, of: string, goal: number) => {
    const v = ratio(b?.["tidings-log"], b?.[of])
    out.push({
      id,
      description,
      goal: `≥ ${goal.toFixed(2)}×`,
      actual: claimed
        ? `${x(v)} (${int(b!["tidings-log"]!)} vs ${int(b![of] ?? Number.NaN)} events/s)`
        : "not measured",
      met: claimed ? v >= goal : null
    })
  }
  vs(
    "log-claim-vs-ceiling",
    "log mode claim throughput vs the per-row two-statement ceiling (same run)",
    "ceiling",
    2.5
  )
  vs(
    "log-claim-vs-graphile-worker",
    "log mode claim throughput vs graphile-worker's best (same run)",
    "graphile-worker",
    2.5
  )
  vs("log-ordered-vs-per-key", "ordered publishing: log mode vs per-key mode (same run)", "tidings-per-key", 4)
  const lat = r.log?.latency
  const other = lat?.find((row) => row.system === "tidings-log" && row.transport === "memory" && row.rate === 1_000)
  const floor = lat?.find((row) => row.system === "raw-reader" && row.transport === "memory" && row.rate === 1_000)
  out.push({
    id: "log-latency-other-process",
    description: "log mode commit → publish p99 at 1,000 events/s, relay in another process (NOTIFY)",
    goal: "< 5 ms",
    actual: other === undefined
      ? "not measured"
      : `${other.p99.median} ms (runs ${other.p99.min}-${other.p99.max}; achieved ${int(other.achievedRate.median)}/s)${
        floor === undefined
          ? ""
          : `; a bare reader in another process, same run: ${floor.p99.median} ms (${
            x(ratio(other.p99.median, floor.p99.median))
          })`
      }`,
    met: other === undefined ? null : other.p99.median < 5
  })
  for (const rate of [500, 1_000]) {
    const log = lat?.find((row) => row.system === "tidings-log" && row.transport === "rabbitmq" && row.rate === rate)
    const direct = lat?.find((row) => row.system === "direct" && row.transport === "rabbitmq" && row.rate === rate)
    const v = ratio(log?.p99.median, direct?.p99.median)
    out.push({
      id: `log-rabbit-confirm-${rate}`,
      description: `log mode commit → RabbitMQ confirm p99 at ${
        int(rate)
      } events/s vs the \`direct\` dual-write floor (same run)`,
      goal: "≤ 1.50×",
      actual: log === undefined || direct === undefined
        ? "not measured"
        : `${x(v)} (${log.p99.median} vs ${direct.p99.median} ms)`,
      met: log === undefined || direct === undefined ? null : v <= 1.5
    })
  }
  const s = r.log?.scale
  const one = s?.rows.find((row) => row.processes === 1)?.eventsPerSecond.median
  const most = s?.rows.reduce((a, row) => (row.processes > a.processes ? row : a), s.rows[0]!)
  const held = ratio(most?.eventsPerSecond.median, one)
  const dupes = s?.rows.reduce((n, row) => n + row.duplicates + row.lost, 0) ?? 0
  out.push({
    id: "log-scale-out",
    description: `${
      most?.processes ?? 4
    } log relay processes on one log: throughput vs 1 process, no event twice (no crash)`,
    goal: "≥ 90% of 1 process, 0 duplicates",
    actual: s === undefined || most === undefined
      ? "not measured"
      : `${pct(held)} of 1 process, ${dupes} duplicates or lost`,
    met: s === undefined || most === undefined ? null : held >= 0.9 && dupes === 0
  })
  const e = r.log?.e2e
  if (e !== undefined) {
    const tidings = Math.max(
      ...e.rows.filter((row) => row.system.startsWith("tidings")).map((row) => row.eventsPerSecond.median)
    )
    const peer = Math.max(
      ...e.rows.filter((row) => !row.system.startsWith("tidings") && row.system !== rawAmqplib).map((row) =>
        row.eventsPerSecond.median
      )
    )
    const ceiling = e.rows.find((row) => row.system === rawAmqplib)?.eventsPerSecond.median
    const v = ratio(tidings, peer)
    out.push({
      id: "e2e-vs-peers",
      description: "end to end into RabbitMQ with confirms: Tidings (best mode) vs the best peer (same run)",
      goal: "≥ 1.50×",
      actual: `${x(v)} (${int(tidings)} vs ${int(peer)} events/s)${
        ceiling === undefined
          ? ""
          : `; the broker alone (raw amqplib from memory, same run): ${int(ceiling)}/s = ${
            x(ratio(ceiling, peer))
          } the best peer`
      }`,
      met: v >= 1.5
    })
    const drain = e.rows.find((row) => row.system === "tidings-log")?.eventsPerSecond.median
    const ok = e.paced.filter((p) => p.p99.median < 50).reduce((m, p) => Math.max(m, p.achievedRate.median), 0)
    const share = ratio(ok, drain)
    out.push({
      id: "e2e-sustained",
      description:
        `highest paced rate with commit → confirm p99 < 50 ms vs the log relay's backlog drain rate (producers alone reach ${
          int(e.producerLimit.median)
        }/s)`,
      goal: "≥ 80%",
      actual: drain === undefined
        ? "not measured"
        : `${pct(share)} (${int(ok)} vs ${int(drain)} events/s)${brokerFloor(e.paced)}`,
      met: drain === undefined ? null : share >= 0.8
    })
  }
  return out
}

/** The broker's own publish → confirm p99 at the paced rates, when measured. */
const brokerFloor = (paced: ReadonlyArray<E2ePacedRow>): string => {
  const floors = paced.filter((p) => p.brokerP99 !== undefined)
  return floors.length === 0
    ? ""
    : `; the broker alone at the same rates (raw amqplib, no database): p99 ${
      floors.map((p) => `${fmt(p.brokerP99!.median)} ms at ${int(p.rate)}/s`).join(", ")
    }`
}

const fmt = (n: number) => (!Number.isFinite(n) ? "n/a" : n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : n.toFixed(0))
const table = (headers: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) =>
  [
    `| ${headers.join(" | ")} |`,
    `|${headers.map((_, i) => (i === 0 ? "---" : "---:")).join("|")}|`,
    ...rows.map((row) => `| ${row.join(" | ")} |`)
  ].join("\n")

/** The log mode section of the Markdown report. */
export const logMarkdown = (l: LogSection | undefined, runs: number): string => {
  if (l === undefined) return ""
  const out: Array<string> = [
    "",
    "### Log mode",
    "",
    `The log has ${l.partitions} partitions; every figure is the median of ${runs} runs. Claim throughput is in the claim table above (\`tidings-log\`: \`LogRelay.layer\`, workers × events per partition and read).`,
    ""
  ]
  if (l.latency !== undefined) {
    out.push(
      "**Latency.** Paced producers, one event per transaction. `tidings-log` memory: commit → publish with `LogRelay` in another process, woken by `NOTIFY`; `raw-reader`: the floor of that path on this machine, a bare postgres.js client in another process that LISTENs and reads the log below the same horizon, with no cursor, lease or publish (`src/logFloorWorker.ts`); RabbitMQ: commit → confirm with the relay in the producers' process; `direct`: each producer publishes its own event after its commit and waits for the confirm (a dual write: the broker's floor).",
      ""
    )
    out.push(
      table(
        [
          "system",
          "transport",
          "rate/s",
          "achieved/s",
          "p50 ms",
          "p99 ms",
          "p99 min–max",
          "reader CPU µs/event",
          "lost",
          "dup"
        ],
        l.latency.map((row) => [
          row.system,
          row.transport,
          int(row.rate),
          int(row.achievedRate.median),
          fmt(row.p50.median),
          fmt(row.p99.median),
          `${fmt(row.p99.min)}–${fmt(row.p99.max)}`,
          row.readerCpuUsPerEvent === undefined ? "—" : int(row.readerCpuUsPerEvent.median),
          String(row.lost),
          String(row.duplicates)
        ])
      ),
      ""
    )
  }
  if (l.scale !== undefined) {
    const one = l.scale.rows.find((row) => row.processes === 1)?.eventsPerSecond.median
    out.push(
      `**Scale-out.** Relay processes of one group (${l.scale.workersPerProcess} workers, batch ${l.scale.batch} each) split the partitions, then drain ${
        int(l.scale.events)
      } events appended in one transaction.`,
      ""
    )
    out.push(
      table(
        ["processes", "events/s", "min–max", "vs 1 process", "duplicates", "lost", "per process"],
        l.scale.rows.map((row) => [
          String(row.processes),
          int(row.eventsPerSecond.median),
          `${int(row.eventsPerSecond.min)}–${int(row.eventsPerSecond.max)}`,
          one === undefined ? "" : pct(row.eventsPerSecond.median / one),
          String(row.duplicates),
          String(row.lost),
          row.perProcess.map(int).join(" / ")
        ])
      ),
      ""
    )
  }
  if (l.consumer !== undefined) {
    const c = l.consumer
    out.push(
      `**Consumers.** ${
        int(c.events)
      } events, a handler writing one row: \`PgLogConsumer\` (handlers and cursor in one transaction per batch) ${
        int(c.log.median)
      }/s (${int(c.log.min)}–${
        int(c.log.max)
      }) against \`AmqpConsumer\` + \`Inbox.wrap\` over RabbitMQ (${c.inboxConfig}) ${int(c.inbox.median)}/s (${
        int(c.inbox.min)
      }–${int(c.inbox.max)}): **${x(c.log.median / c.inbox.median)}**. ${c.lost} lost, ${c.duplicates} duplicates.`,
      ""
    )
  }
  if (l.retention !== undefined) {
    out.push(
      `**Retention.** ${int(l.retention.rows)} events behind every cursor deleted in ${
        l.retention.seconds.toFixed(2)
      } s (${int(l.retention.rows / l.retention.seconds)} rows/s, ${int(l.retention.batch)} per round).`,
      ""
    )
  }
  if (l.e2e !== undefined) {
    const e = l.e2e
    out.push(
      `**End to end into RabbitMQ.** A backlog of ${
        int(e.events)
      } events moved into a classic queue with publisher confirms, read back afterwards (each event once). \`${rawAmqplib}\` publishes the same messages from memory with no database: what the broker takes on this machine.`,
      ""
    )
    out.push(
      table(
        ["system", "configuration", "events/s", "min–max", "lost", "dup"],
        e.rows.map((row) => [
          row.system,
          row.config,
          int(row.eventsPerSecond.median),
          `${int(row.eventsPerSecond.min)}–${int(row.eventsPerSecond.max)}`,
          String(row.lost),
          String(row.duplicates)
        ])
      ),
      ""
    )
    out.push(
      `Paced into RabbitMQ (log mode, ${e.txEvents} events per transaction, 16 producers); the producers alone (no relay) reach ${
        int(e.producerLimit.median)
      }/s on this machine. The last column: the broker alone at the same rate (raw amqplib publishing from memory, no database), publish → confirm.`,
      ""
    )
    out.push(
      table(
        ["rate/s", "achieved/s", "p50 ms", "p99 ms", "broker alone p99 ms"],
        e.paced.map((p) => [
          int(p.rate),
          int(p.achievedRate.median),
          fmt(p.p50.median),
          fmt(p.p99.median),
          p.brokerP99 === undefined ? "—" : fmt(p.brokerP99.median)
        ])
      ),
      ""
    )
  }
  return out.join("\n")
}
