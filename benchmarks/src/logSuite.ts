/**
 * Log mode's steps in the suite (`suite.ts` wires them into its phases): latency with the relay in
 * another process and into RabbitMQ beside the dual-write floor; scale-out of relay processes on one
 * log; retention; the consumer comparison; and the end-to-end phase against graphile-worker and
 * pg-boss. Each builder returns its steps and a function that summarises what they measured.
 * @module
 */
import type { Message } from "@tidings/core/Message"
import { Duration, Effect } from "effect"
import * as BrokerPaced from "./brokerPaced.ts"
import * as ConsumerBench from "./consumerBench.ts"
import * as EndToEnd from "./endToEnd.ts"
import * as Latency from "./latency.ts"
import {
  type E2ePacedRow,
  type E2eRow,
  type LogLatencyRow,
  type LogScaleRow,
  type LogSection,
  rawAmqplib
} from "./lib/logReport.ts"
import * as Pg from "./lib/postgres.ts"
import { int, log, ms } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { round, summarize } from "./lib/stats.ts"
import * as LogLatency from "./logLatency.ts"
import * as LogMode from "./logMode.ts"
import * as LogScale from "./logScale.ts"
import type { GraphileConfig, PgBossConfig } from "./peers.ts"
import { graphileLabel, pgBossLabel } from "./peers.ts"
import * as PeersE2e from "./peersE2e.ts"
import * as Publish from "./publish.ts"
import type { Step } from "./suite.ts"

/** Settings of log mode's suite steps. */
export interface LogOptions {
  readonly latencyRates: ReadonlyArray<number>
  readonly rabbitRates: ReadonlyArray<number>
  readonly duration: number
  readonly warmup: number
  readonly producers: number
  readonly scale: {
    readonly processes: ReadonlyArray<number>
    readonly workers: number
    readonly batch: number
    readonly events: number
  }
  readonly consumerEvents: number
  readonly inbox: { readonly concurrency: number; readonly prefetch: number }
  readonly e2e: {
    readonly events: number
    readonly graphile: ReadonlyArray<GraphileConfig>
    readonly pgBoss: ReadonlyArray<PgBossConfig>
    /** Paced rates as fractions of the log relay's measured drain rate. */
    readonly fractions: ReadonlyArray<number>
    readonly txEvents: number
  }
}

/** The suite's settings for log mode (`quick`: small counts). */
export const options = (quick: boolean): LogOptions => ({
  latencyRates: quick ? [1_000] : [200, 500, 1_000],
  rabbitRates: [500, 1_000],
  duration: quick ? 1.5 : 8,
  warmup: quick ? 0.5 : 1,
  producers: 16,
  scale: { processes: [1, 2, 4], workers: 2, batch: quick ? 100 : 1_000, events: quick ? 5_000 : 40_000 },
  consumerEvents: quick ? 2_000 : 20_000,
  inbox: { concurrency: 64, prefetch: 512 },
  e2e: {
    events: quick ? 3_000 : 20_000,
    graphile: quick
      ? [{ concurrency: 24, localQueue: 500, batchDelay: 0 }]
      : [{ concurrency: 24, localQueue: 500, batchDelay: 0 }, { concurrency: 64, localQueue: 2_000, batchDelay: 0 }],
    pgBoss: quick
      ? [{ mode: "work", fetchers: 4, batch: 1_000 }]
      : [{ mode: "work", fetchers: 4, batch: 1_000 }, { mode: "work", fetchers: 8, batch: 100 }],
    fractions: quick ? [0.5, 1] : [0.4, 0.6, 0.8, 1],
    txEvents: 10
  }
})

type Problems = Array<string>
const lat = (label: string, r: LogLatency.Sample) =>
  log(
    `    ${label}: p50 ${ms(r.p50Ms)} ms, p99 ${ms(r.p99Ms)} ms (achieved ${int(r.achievedRate)}/s${
      r.readerCpuUsPerEvent === undefined ? "" : `, reader CPU ${int(r.readerCpuUsPerEvent)} µs/event`
    })`
  )

/** Latency steps of the latency phase: `runs` interleaved rounds. */
export const latencySteps = (
  url: () => string,
  rabbitUrl: () => string | undefined,
  base: Latency.Options,
  o: LogOptions,
  runs: number,
  problems: Problems
) => {
  const samples = new Map<
    string,
    {
      key: Omit<LogLatencyRow, "p50" | "p99" | "achievedRate" | "lost" | "duplicates" | "readerCpuUsPerEvent">
      runs: Array<LogLatency.Sample>
    }
  >()
  const add = (
    key: Omit<LogLatencyRow, "p50" | "p99" | "achievedRate" | "lost" | "duplicates" | "readerCpuUsPerEvent">,
    r: LogLatency.Sample
  ) => {
    const k = `${key.system}/${key.transport}/${key.rate}`
    if (!samples.has(k)) samples.set(k, { key, runs: [] })
    samples.get(k)!.runs.push(r)
    if (r.lost > 0 || r.duplicates > 0) problems.push(`log latency ${k}: ${r.lost} lost, ${r.duplicates} duplicates`)
  }
  const opts = (rate: number) => ({ rate, duration: o.duration, warmup: o.warmup, producers: o.producers })
  const steps: Array<Step> = []
  for (let run = 1; run <= runs; run++) {
    for (const rate of o.latencyRates) {
      steps.push({
        label: `latency run ${run}/${runs}: log mode, ${int(rate)} events/s, relay in another process (NOTIFY)`,
        estimate: o.duration + o.warmup + 3,
        run: Effect.gen(function*() {
          const r = yield* LogLatency.otherProcess(url(), opts(rate))
          add({ system: "tidings-log", transport: "memory", target: "publish", rate }, r)
          lat(`tidings-log other process ${rate}/s`, r)
        })
      })
      steps.push({
        label: `latency run ${run}/${runs}: the floor at ${
          int(rate)
        } events/s, a bare postgres.js reader in another process (NOTIFY, no bookkeeping)`,
        estimate: o.duration + o.warmup + 3,
        run: Effect.gen(function*() {
          const r = yield* LogLatency.otherProcess(url(), opts(rate), "floor")
          add({ system: "raw-reader", transport: "memory", target: "publish", rate }, r)
          lat(`raw reader other process ${rate}/s`, r)
        })
      })
    }
    for (const rate of o.rabbitRates) {
      steps.push({
        label: `latency run ${run}/${runs}: log mode into RabbitMQ at ${
          int(rate)
        } events/s, beside the direct dual write`,
        estimate: 2 * (o.duration + o.warmup + 2),
        run: Effect.gen(function*() {
          const broker = rabbitUrl()
          if (broker === undefined) return
          const r = yield* LogLatency.rabbit(url(), broker, opts(rate))
          add({ system: "tidings-log", transport: "rabbitmq", target: "confirm", rate }, r)
          lat(`tidings-log RabbitMQ ${rate}/s`, r)
          const { runs: direct } = yield* Latency.paced(url(), broker, {
            transport: "rabbitmq",
            wakeup: "local",
            rate,
            queue: "classic",
            relay: "direct"
          }, { ...base, duration: o.duration, warmup: o.warmup })
          const confirm = direct.find((d) => d.target === "confirm")
          if (confirm !== undefined) {
            const d = { ...confirm, duplicates: confirm.transport === "rabbitmq" ? confirm.duplicates : 0 }
            add({ system: "direct", transport: "rabbitmq", target: "confirm", rate }, d)
            lat(`direct dual write RabbitMQ ${rate}/s`, d)
          }
        })
      })
    }
  }
  const result = (): ReadonlyArray<LogLatencyRow> =>
    [...samples.values()].map(({ key, runs: rs }) => ({
      ...key,
      p50: summarize(rs.map((r) => r.p50Ms)),
      p99: summarize(rs.map((r) => r.p99Ms)),
      achievedRate: summarize(rs.map((r) => r.achievedRate), 0),
      ...(rs.every((r) => r.readerCpuUsPerEvent !== undefined)
        ? { readerCpuUsPerEvent: summarize(rs.map((r) => r.readerCpuUsPerEvent!), 0) }
        : {}),
      lost: rs.reduce((n, r) => n + r.lost, 0),
      duplicates: rs.reduce((n, r) => n + r.duplicates, 0)
    }))
  return { steps, result }
}

/** Scale-out steps (and a retention measurement at the end). */
export const scaleSteps = (url: () => string, o: LogOptions, runs: number, problems: Problems) => {
  let msgs: ReadonlyArray<Message> = []
  let warm: ReadonlyArray<Message> = []
  const samples = new Map<number, Array<import("./scaleOut.ts").ScaleRun>>()
  let retention: LogSection["retention"]
  const steps: Array<Step> = []
  for (let run = 1; run <= runs; run++) {
    for (const processes of o.scale.processes) {
      steps.push({
        label: `scale-out run ${run}/${runs}: ${processes} log relay process${
          processes === 1 ? "" : "es"
        } (${o.scale.workers} workers each, batch ${o.scale.batch})`,
        estimate: 4 + processes + o.scale.events / 15_000,
        run: Effect.gen(function*() {
          if (msgs.length === 0) {
            msgs = yield* Seed.messages(o.scale.events)
            warm = yield* Seed.messages(Math.min(8_000, o.scale.events / 2))
          }
          const r = yield* LogScale.run(url(), processes, o.scale.workers, o.scale.batch, msgs, warm)
          samples.set(processes, [...(samples.get(processes) ?? []), r])
          if (r.duplicates > 0 || r.lost > 0) {
            problems.push(`log scale-out ${processes} processes: ${r.duplicates} duplicates, ${r.lost} lost`)
          }
          log(
            `    ${processes} process${processes === 1 ? "" : "es"}: ${int(r.eventsPerSecond)} events/s, per process ${
              r.perProcess.map(int).join(" / ")
            }, ${r.duplicates} duplicates`
          )
        })
      })
    }
  }
  steps.push({
    label: `log retention: ${int(o.scale.events)} events every group passed, deleted`,
    estimate: 6,
    run: Effect.scoped(Effect.gen(function*() {
      const context = yield* Pg.openPool(url(), 6)
      yield* Effect.gen(function*() {
        if (msgs.length === 0) msgs = yield* Seed.messages(o.scale.events)
        const { stores } = yield* LogMode.prepare(msgs)
        yield* LogMode.drain(stores, { group: "retention", concurrency: 2, batchSize: 1_000 }, msgs.length, 120)
        const batch = 10_000
        const started = performance.now()
        let rows = 0
        while (true) {
          const n = yield* stores.log.prune({ olderThan: Duration.zero, limit: batch }).pipe(Effect.orDie)
          if (n === undefined || n === 0) break
          rows += n
        }
        retention = { rows, seconds: round((performance.now() - started) / 1000, 3), batch }
        log(`    pruned ${int(rows)} events in ${retention.seconds} s`)
        if (rows !== msgs.length) problems.push(`log retention pruned ${rows} of ${msgs.length} events`)
      }).pipe(Effect.provideContext(context))
    }))
  })
  const result = () => ({
    scale: {
      workersPerProcess: o.scale.workers,
      batch: o.scale.batch,
      events: o.scale.events,
      rows: o.scale.processes.filter((p) => samples.has(p)).map((processes): LogScaleRow => {
        const rs = samples.get(processes)!
        return {
          processes,
          eventsPerSecond: summarize(rs.map((r) => r.eventsPerSecond), 0),
          duplicates: rs.reduce((n, r) => n + r.duplicates, 0),
          lost: rs.reduce((n, r) => n + r.lost, 0),
          perProcess: rs[rs.length - 1]!.perProcess
        }
      })
    },
    ...(retention === undefined ? {} : { retention })
  })
  return { steps, result }
}

/** The consumer comparison: `PgLogConsumer` vs the inbox over RabbitMQ, interleaved. */
export const consumerSteps = (
  url: () => string,
  rabbitUrl: () => string | undefined,
  o: LogOptions,
  runs: number,
  problems: Problems
) => {
  let msgs: ReadonlyArray<Message> = []
  const logRuns: Array<ConsumerBench.ConsumerRun> = []
  const inboxRuns: Array<ConsumerBench.ConsumerRun> = []
  const steps: Array<Step> = []
  const check = (what: string, r: ConsumerBench.ConsumerRun) => {
    if (r.lost > 0 || r.duplicates > 0) problems.push(`consumer ${what}: ${r.lost} lost, ${r.duplicates} duplicates`)
    log(`    ${what}: ${int(r.eventsPerSecond)} events/s`)
  }
  for (let run = 1; run <= runs; run++) {
    steps.push({
      label: `consumer run ${run}/${runs}: PgLogConsumer vs AmqpConsumer + inbox (RabbitMQ), ${
        int(o.consumerEvents)
      } events, one row each`,
      estimate: 4 + o.consumerEvents / 1_000,
      run: Effect.gen(function*() {
        const broker = rabbitUrl()
        if (broker === undefined) return
        if (msgs.length === 0) msgs = yield* Seed.messages(o.consumerEvents)
        const l = yield* ConsumerBench.logRun(url(), msgs)
        logRuns.push(l)
        check("PgLogConsumer", l)
        const i = yield* ConsumerBench.inboxRun(url(), broker, msgs, o.inbox.concurrency, o.inbox.prefetch)
        inboxRuns.push(i)
        check("inbox", i)
      })
    })
  }
  const result = () =>
    logRuns.length === 0 ? undefined : {
      events: o.consumerEvents,
      log: summarize(logRuns.map((r) => r.eventsPerSecond), 0),
      inbox: summarize(inboxRuns.map((r) => r.eventsPerSecond), 0),
      inboxConfig: `concurrency ${o.inbox.concurrency}, prefetch ${o.inbox.prefetch}`,
      lost: [...logRuns, ...inboxRuns].reduce((n, r) => n + r.lost, 0),
      duplicates: [...logRuns, ...inboxRuns].reduce((n, r) => n + r.duplicates, 0)
    }
  return { steps, result }
}

/** The end-to-end phase: backlogs into RabbitMQ, then paced log-mode runs and the producers' limit. */
export const e2eSteps = (
  url: () => string,
  rabbitUrl: () => string | undefined,
  o: LogOptions,
  runs: number,
  problems: Problems
) => {
  let msgs: ReadonlyArray<Message> = []
  const drains = new Map<string, { system: string; config: string; runs: Array<EndToEnd.E2eDrain> }>()
  const record = (system: string, config: string, r: EndToEnd.E2eDrain) => {
    const k = `${system}/${config}`
    if (!drains.has(k)) drains.set(k, { system, config, runs: [] })
    drains.get(k)!.runs.push(r)
    if (r.lost > 0 || r.duplicates > 0) problems.push(`e2e ${k}: ${r.lost} lost, ${r.duplicates} duplicates`)
    log(`    ${system} (${config}): ${int(r.eventsPerSecond)} events/s`)
  }
  const paced = new Map<number, Array<EndToEnd.PacedRun>>()
  const brokerPaced = new Map<number, Array<BrokerPaced.BrokerPacedRun>>()
  const producers: Array<number> = []
  const pacedOpts = { duration: o.duration, warmup: o.warmup, producers: o.producers, txEvents: o.e2e.txEvents }
  const steps: Array<Step> = []
  for (let run = 1; run <= runs; run++) {
    steps.push({
      label: `e2e run ${run}/${runs}: ${
        int(o.e2e.events)
      } events into RabbitMQ by Tidings (row, log), graphile-worker, pg-boss, and raw amqplib (no database)`,
      estimate: 10 + (o.e2e.events / 1_500) * (3 + o.e2e.graphile.length + o.e2e.pgBoss.length),
      run: Effect.gen(function*() {
        const broker = rabbitUrl()
        if (broker === undefined) return
        if (msgs.length === 0) msgs = yield* Seed.messages(o.e2e.events)
        record("tidings-row", "Relay: 4 pollers, batch 1000", yield* EndToEnd.tidingsDrain(url(), broker, "row", msgs))
        record("tidings-log", "LogRelay: defaults", yield* EndToEnd.tidingsDrain(url(), broker, "log", msgs))
        for (const c of o.e2e.graphile) {
          record("graphile-worker", graphileLabel(c), yield* PeersE2e.graphileDrain(url(), broker, o.e2e.events, c))
        }
        for (const c of o.e2e.pgBoss) {
          record("pg-boss", pgBossLabel(c), yield* PeersE2e.pgBossDrain(url(), broker, o.e2e.events, c))
        }
        // The broker's own ceiling on this machine: the same messages from memory, no database.
        const ceiling = yield* Publish.raw(broker, { relays: 4, batch: 1_000, channels: 1 }, "window", msgs)
        record(rawAmqplib, "no database: 4,000 confirms in flight, 1 channel", {
          events: msgs.length - ceiling.lost,
          seconds: round(ceiling.seconds, 3),
          eventsPerSecond: ceiling.perSecond,
          lost: ceiling.lost,
          duplicates: ceiling.duplicates
        })
      })
    })
  }
  const drainRate = () => {
    const d = drains.get("tidings-log/LogRelay: defaults")
    return d === undefined ? undefined : summarize(d.runs.map((r) => r.eventsPerSecond), 0).median
  }
  for (let run = 1; run <= runs; run++) {
    steps.push({
      label: `e2e run ${run}/${runs}: paced into RabbitMQ at ${
        o.e2e.fractions.map((f) => `${Math.round(f * 100)}%`).join(", ")
      } of the log relay's drain rate; the producers alone`,
      estimate: (o.e2e.fractions.length + 1) * (o.duration + o.warmup + 2) + o.e2e.fractions.length * (o.duration + 1),
      run: Effect.gen(function*() {
        const broker = rabbitUrl()
        const drain = drainRate()
        if (broker === undefined || drain === undefined) return
        if (msgs.length === 0) msgs = yield* Seed.messages(o.e2e.events)
        for (const f of o.e2e.fractions) {
          const rate = Math.round((f * drain) / 100) * 100
          const r = yield* EndToEnd.paced(url(), broker, rate, pacedOpts)
          paced.set(f, [...(paced.get(f) ?? []), r])
          if (r.lost > 0) problems.push(`e2e paced ${rate}/s: ${r.lost} not confirmed`)
          log(
            `    paced ${int(rate)}/s: achieved ${int(r.achievedRate)}/s, p50 ${ms(r.p50Ms)} ms, p99 ${ms(r.p99Ms)} ms`
          )
          const b = yield* BrokerPaced.run(broker, rate, o.duration, o.e2e.txEvents, msgs)
          brokerPaced.set(f, [...(brokerPaced.get(f) ?? []), b])
          log(
            `    the broker alone at ${int(rate)}/s (raw amqplib, no database): p50 ${ms(b.p50Ms)} ms, p99 ${
              ms(b.p99Ms)
            } ms`
          )
        }
        const alone = yield* EndToEnd.paced(url(), broker, Math.max(20_000, drain * 3), pacedOpts, false)
        producers.push(alone.achievedRate)
        log(`    producers alone: ${int(alone.achievedRate)}/s`)
      })
    })
  }
  const result = (): LogSection["e2e"] => {
    if (drains.size === 0) return undefined
    // Each system's best configuration (by median).
    const best = new Map<string, E2eRow>()
    for (const d of drains.values()) {
      const row: E2eRow = {
        system: d.system,
        config: d.config,
        eventsPerSecond: summarize(d.runs.map((r) => r.eventsPerSecond), 0),
        lost: d.runs.reduce((n, r) => n + r.lost, 0),
        duplicates: d.runs.reduce((n, r) => n + r.duplicates, 0)
      }
      const had = best.get(d.system)
      if (had === undefined || row.eventsPerSecond.median > had.eventsPerSecond.median) best.set(d.system, row)
    }
    return {
      events: o.e2e.events,
      rows: [...best.values()],
      paced: [...paced.entries()].map(([f, rs]): E2ePacedRow => {
        const floor = brokerPaced.get(f) ?? []
        return {
          rate: rs[0]!.rate,
          achievedRate: summarize(rs.map((r) => r.achievedRate), 0),
          p50: summarize(rs.map((r) => r.p50Ms)),
          p99: summarize(rs.map((r) => r.p99Ms)),
          ...(floor.length === 0 ? {} : { brokerP99: summarize(floor.map((b) => b.p99Ms)) })
        }
      }),
      producerLimit: summarize(producers, 0),
      txEvents: o.e2e.txEvents
    }
  }
  return { steps, result }
}

/** The log mode section from what the steps measured. */
export const section = (parts: {
  readonly latency?: ReadonlyArray<LogLatencyRow>
  readonly scale?: ReturnType<ReturnType<typeof scaleSteps>["result"]>
  readonly consumer?: LogSection["consumer"]
  readonly e2e?: LogSection["e2e"]
}): LogSection | undefined => {
  if (
    parts.latency === undefined && parts.scale === undefined && parts.consumer === undefined && parts.e2e === undefined
  ) return undefined
  return {
    partitions: LogMode.partitions,
    ...(parts.latency === undefined || parts.latency.length === 0 ? {} : { latency: parts.latency }),
    ...(parts.scale === undefined ? {} : parts.scale),
    ...(parts.consumer === undefined ? {} : { consumer: parts.consumer }),
    ...(parts.e2e === undefined ? {} : { e2e: parts.e2e })
  }
}
