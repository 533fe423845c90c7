/**
 * The benchmark suite's pure parts: medians, chart axes and SVG, the targets and the Markdown report
 * built from a results object (no database: the suite itself runs with `pnpm bench`).
 */
import { assert, describe, it } from "@effect/vitest"
import { summarize } from "../benchmarks/src/lib/stats.ts"
import {
  charts,
  markdown,
  replaceBetween,
  type SuiteResult,
  systems,
  targets
} from "../benchmarks/src/lib/suiteReport.ts"
import { barChart, lineChart, logTicks, niceTicks, tickLabel } from "../benchmarks/src/lib/svg.ts"

const s = (median: number, min = median, max = median) => ({ median, min, max, samples: [min, median, max] })

const fixture = (overrides: Partial<SuiteResult> = {}): Omit<SuiteResult, "targets"> => ({
  version: 1,
  date: "2026-01-02T03:04:05.000Z",
  quick: false,
  runs: 3,
  command: "pnpm bench",
  durationSeconds: 900,
  machine: {
    cpus: 2,
    cpuModel: "Test CPU",
    memoryGiB: 8,
    os: "Linux",
    node: "v24.0.0",
    postgres: "18.4",
    fsync: "on",
    synchronousCommit: "on",
    loadAverage: { start: [0.1, 0.2, 0.3], end: [1, 1, 1] }
  },
  claim: {
    events: 20_000,
    capSeconds: 4,
    rows: [
      {
        system: "tidings-unordered",
        config: "relays 1, batch 100",
        relays: 1,
        batch: 100,
        eventsPerSecond: s(20_000, 19_000, 21_000),
        capped: false,
        duplicates: 0,
        lost: 0
      },
      {
        system: "tidings-unordered",
        config: "relays 4, batch 100",
        relays: 4,
        batch: 100,
        eventsPerSecond: s(30_000, 28_000, 31_000),
        capped: false,
        duplicates: 0,
        lost: 0
      },
      {
        system: "tidings-unordered",
        config: "relays 4, batch 10",
        relays: 4,
        batch: 10,
        eventsPerSecond: s(5_000),
        capped: true,
        duplicates: 0,
        lost: 0
      },
      {
        system: "graphile-worker",
        config: "concurrency 24",
        eventsPerSecond: s(10_000),
        capped: false,
        duplicates: 0,
        lost: 0
      },
      {
        system: "pg-boss",
        config: "fetch+complete, 4 loops, batch 1000",
        eventsPerSecond: s(12_000),
        capped: false,
        duplicates: 0,
        lost: 0
      }
    ],
    best: {
      "tidings-unordered": 30_000,
      "tidings-per-key": 0,
      "tidings-log": 0,
      ceiling: 50_000,
      "sql-loop": 0,
      "graphile-worker": 10_000,
      "pg-boss": 12_000
    },
    bestOf: {
      "tidings-unordered": { config: "relays 4, batch 100", min: 28_000, max: 31_000 },
      "graphile-worker": { config: "concurrency 24", min: 10_000, max: 10_000 },
      "pg-boss": { config: "fetch+complete, 4 loops, batch 1000", min: 12_000, max: 12_000 }
    },
    variants: {}
  },
  latency: {
    durationSeconds: 5,
    warmupSeconds: 1,
    relays: 4,
    producers: 16,
    batch: 100,
    graphile: "concurrency 24",
    rows: [200, 1_000].flatMap((rate) => [
      {
        system: "tidings",
        mode: "notify",
        transport: "memory",
        target: "publish",
        rate,
        p50: s(1),
        p95: s(3),
        p99: s(rate === 1_000 ? 9 : 4, 3, 12),
        max: s(20),
        achievedRate: s(rate),
        events: rate * 15,
        lost: 0,
        duplicates: 0
      },
      {
        system: "tidings",
        mode: "listen",
        transport: "memory",
        target: "publish",
        rate,
        p50: s(2),
        p95: s(5),
        p99: s(18),
        max: s(30),
        achievedRate: s(rate),
        events: rate * 15,
        lost: 0,
        duplicates: 0
      },
      {
        system: "graphile-worker",
        mode: "add→start",
        transport: "postgres",
        target: "start",
        rate,
        p50: s(2),
        p95: s(4),
        p99: s(6),
        max: s(9),
        achievedRate: s(rate),
        events: rate * 15,
        lost: 0,
        duplicates: 0
      }
    ])
  },
  scaleOut: {
    relaysPerProcess: 2,
    batch: 500,
    events: 20_000,
    rows: [
      { processes: 1, eventsPerSecond: s(20_000), duplicates: 0, lost: 0, perProcess: [20_000] },
      { processes: 4, eventsPerSecond: s(18_000), duplicates: 0, lost: 0, perProcess: [5_000, 5_000, 5_000, 5_000] }
    ]
  },
  problems: [],
  ...overrides
})

describe("summarize", () => {
  it("takes the median, min and max", () => {
    assert.deepStrictEqual(summarize([3, 1, 2]), { median: 2, min: 1, max: 3, samples: [3, 1, 2] })
    assert.strictEqual(summarize([4, 1, 2, 3]).median, 2.5)
    assert.strictEqual(summarize([1.236, 1.9, 1.1], 2).median, 1.24)
    assert.isNaN(summarize([]).median)
    assert.strictEqual(summarize([Number.NaN, 5, 7, 6]).median, 6)
  })
})

describe("svg", () => {
  it("chooses round ticks", () => {
    assert.deepStrictEqual(niceTicks(0, 30_000), [0, 10_000, 20_000, 30_000])
    assert.deepStrictEqual(niceTicks(0, 12), [0, 2.5, 5, 7.5, 10, 12.5].filter((t) => t <= 12))
    assert.deepStrictEqual(logTicks(1, 100), [1, 2, 5, 10, 20, 50, 100])
    assert.strictEqual(tickLabel(25_000), "25k")
    assert.strictEqual(tickLabel(1_500), "1.5k")
    assert.strictEqual(tickLabel(0.5), "0.5")
  })

  it("draws lines and bars without NaN, escaping text", () => {
    const svg = lineChart({
      title: "a < b",
      xLabel: "relays",
      yLabel: "events/s",
      xScale: "log",
      yScale: "log",
      series: [{
        name: "batch 100",
        points: [{ x: 1, y: 10, min: 8, max: 12 }, { x: 4, y: 40 }, { x: 8, y: Number.NaN }]
      }],
      hline: { y: 15, label: "target" }
    })
    assert.match(svg, /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/)
    assert.include(svg, "a &lt; b")
    assert.include(svg, "batch 100")
    assert.notInclude(svg, "NaN")
    const bars = barChart({
      title: "best",
      unit: "events/s",
      bars: [{ label: "x", value: 10, min: 9, max: 11 }, { label: "y", value: Number.NaN }]
    })
    assert.notInclude(bars, "NaN")
    assert.include(bars, "n/a")
  })
})

describe("suite report", () => {
  it("checks the targets against the run", () => {
    const t = Object.fromEntries(targets(fixture()).map((x) => [x.id, x]))
    assert.strictEqual(t["claim-vs-graphile-worker"]!.met, true)
    assert.strictEqual(t["claim-vs-graphile-worker"]!.actual, "3.00×")
    assert.strictEqual(t["claim-vs-pg-boss"]!.met, false)
    assert.strictEqual(t["latency-p99-notify"]!.met, true)
    assert.strictEqual(t["latency-p99-listen"]!.met, false)
    assert.strictEqual(t["bloat-bloated"]!.met, null)
    assert.strictEqual(t["scale-out"]!.met, true)
    assert.strictEqual(t["no-loss"]!.met, true)
    assert.isUndefined(t["quick-duration"])
    const quick = Object.fromEntries(
      targets(fixture({ quick: true, durationSeconds: 200, problems: ["lost one"] })).map((x) => [x.id, x])
    )
    assert.strictEqual(quick["quick-duration"]!.met, false)
    assert.strictEqual(quick["no-loss"]!.met, false)
  })

  it("writes the Markdown with the machine, the warning, tables and chart links", () => {
    const partial = fixture()
    const r: SuiteResult = { ...partial, targets: targets(partial) }
    const md = markdown(r, (name) => `results/x-${name}.svg`)
    assert.include(md, "2 cores, Test CPU")
    assert.include(md, "don't compare")
    assert.include(md, "| tidings-unordered | relays 4, batch 100 | 30,000 |")
    assert.include(md, "](results/x-claim-best.svg)")
    assert.include(md, "](results/x-latency.svg)")
    assert.include(md, "**not met**")
    assert.deepStrictEqual(Object.keys(charts(r)).sort(), [
      "claim-best",
      "claim-tidings-unordered",
      "latency",
      "scale-out"
    ])
    for (const system of systems) assert.include(md, `| ${system} |`)
  })

  it("checks log mode's targets and reports its section", () => {
    const base = fixture()
    const partial = fixture({
      claim: { ...base.claim!, best: { ...base.claim!.best, "tidings-log": 130_000, "tidings-per-key": 25_000 } },
      log: {
        partitions: 16,
        latency: [
          {
            system: "tidings-log",
            transport: "memory",
            target: "publish",
            rate: 1_000,
            p50: s(1),
            p99: s(4.5),
            achievedRate: s(1_000),
            lost: 0,
            duplicates: 0
          },
          {
            system: "raw-reader",
            transport: "memory",
            target: "publish",
            rate: 1_000,
            p50: s(0.5),
            p99: s(3),
            achievedRate: s(1_000),
            lost: 0,
            duplicates: 0
          },
          {
            system: "tidings-log",
            transport: "rabbitmq",
            target: "confirm",
            rate: 500,
            p50: s(2),
            p99: s(9),
            achievedRate: s(500),
            lost: 0,
            duplicates: 0
          },
          {
            system: "direct",
            transport: "rabbitmq",
            target: "confirm",
            rate: 500,
            p50: s(1),
            p99: s(8),
            achievedRate: s(500),
            lost: 0,
            duplicates: 0
          },
          {
            system: "tidings-log",
            transport: "rabbitmq",
            target: "confirm",
            rate: 1_000,
            p50: s(3),
            p99: s(20),
            achievedRate: s(1_000),
            lost: 0,
            duplicates: 0
          },
          {
            system: "direct",
            transport: "rabbitmq",
            target: "confirm",
            rate: 1_000,
            p50: s(1),
            p99: s(10),
            achievedRate: s(1_000),
            lost: 0,
            duplicates: 0
          }
        ],
        scale: {
          workersPerProcess: 2,
          batch: 1_000,
          events: 40_000,
          rows: [
            { processes: 1, eventsPerSecond: s(50_000), duplicates: 0, lost: 0, perProcess: [40_000] },
            {
              processes: 4,
              eventsPerSecond: s(46_000),
              duplicates: 0,
              lost: 0,
              perProcess: [10_000, 10_000, 10_000, 10_000]
            }
          ]
        },
        consumer: {
          events: 20_000,
          log: s(6_000),
          inbox: s(2_000),
          inboxConfig: "concurrency 64, prefetch 512",
          lost: 0,
          duplicates: 0
        },
        retention: { rows: 40_000, seconds: 0.5, batch: 10_000 },
        e2e: {
          events: 20_000,
          rows: [
            { system: "tidings-log", config: "LogRelay: defaults", eventsPerSecond: s(9_000), lost: 0, duplicates: 0 },
            { system: "pg-boss", config: "work()", eventsPerSecond: s(5_000), lost: 0, duplicates: 0 },
            { system: "raw-amqplib", config: "no database", eventsPerSecond: s(20_000), lost: 0, duplicates: 0 }
          ],
          paced: [{ rate: 4_000, achievedRate: s(4_000), p50: s(5), p99: s(30), brokerP99: s(70) }, {
            rate: 8_000,
            achievedRate: s(7_500),
            p50: s(20),
            p99: s(80)
          }],
          producerLimit: s(12_000),
          txEvents: 10
        }
      }
    })
    const t = Object.fromEntries(targets(partial).map((x) => [x.id, x]))
    assert.strictEqual(t["log-claim-vs-ceiling"]!.met, true, "130,000 vs 50,000")
    assert.strictEqual(t["log-claim-vs-graphile-worker"]!.met, true)
    assert.strictEqual(t["log-ordered-vs-per-key"]!.met, true)
    assert.strictEqual(t["log-latency-other-process"]!.met, true)
    assert.include(t["log-latency-other-process"]!.actual, "same run: 3 ms (1.50×)")
    assert.strictEqual(t["log-rabbit-confirm-500"]!.met, true)
    assert.strictEqual(t["log-rabbit-confirm-1000"]!.met, false, "2× the floor")
    assert.strictEqual(t["log-scale-out"]!.met, true)
    assert.strictEqual(t["e2e-vs-peers"]!.met, true, "9,000 vs pg-boss 5,000: raw amqplib is no peer")
    assert.include(t["e2e-vs-peers"]!.actual, "the broker alone (raw amqplib from memory, same run): 20,000/s = 4.00×")
    assert.strictEqual(t["e2e-sustained"]!.met, false, "4,000 of 9,000")
    assert.include(
      t["e2e-sustained"]!.actual,
      "the broker alone at the same rates (raw amqplib, no database): p99 70.0 ms at 4,000/s"
    )
    const missing = Object.fromEntries(targets(fixture()).map((x) => [x.id, x]))
    assert.strictEqual(missing["log-claim-vs-ceiling"]!.met, null)
    assert.strictEqual(missing["log-scale-out"]!.met, null)
    const md = markdown({ ...partial, targets: targets(partial) }, (name) => name)
    assert.include(md, "### Log mode")
    assert.include(md, "**3.00×**")
    assert.include(md, "| pg-boss | work() | 5,000 |")
  })

  it("replaces the generated part of a page", () => {
    assert.strictEqual(replaceBetween("a\n<s>\nold\n<e>\nb\n", "<s>", "<e>", "new\n"), "a\n<s>\nnew\n<e>\nb\n")
    assert.strictEqual(replaceBetween("a\n", "<s>", "<e>", "new\n"), "a\n\n<s>\nnew\n<e>\n")
  })
})
