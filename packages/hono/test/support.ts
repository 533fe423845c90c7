/**
 * Helpers for the Hono adapter's tests: app layers on memory stores and on a fresh Postgres schema,
 * a bounded wait, and a small parser of the Prometheus text format (strict enough to fail on what a
 * scraper would reject).
 */
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as MemoryInboxStore from "@tidings/core/MemoryInboxStore"
import * as MemoryOutboxStore from "@tidings/core/MemoryOutboxStore"
import * as MemorySagaStore from "@tidings/core/MemorySagaStore"
import * as Relay from "@tidings/core/Relay"
import * as Migrator from "@tidings/postgres/Migrator"
import * as PgInboxStore from "@tidings/postgres/PgInboxStore"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as PgSagaStore from "@tidings/postgres/PgSagaStore"
import { Effect, Layer, References } from "effect"
import { SqlClient } from "effect/sql"
import { pgClientLayer, schemaName } from "../../../test/support/pg.ts"
import { until } from "../../../test/support/progress.ts"

/** A fast relay for tests: short polls, no retention, stats every 100 ms. */
export const relayConfig: Relay.Config = {
  pollInterval: { min: 0, base: "20 millis", max: "100 millis" },
  retention: false,
  statsInterval: "100 millis",
  maxAttempts: 3
}

// Relays warn about every failed event and the routes log server errors: keep the test output readable.
const quiet = Layer.succeed(References.MinimumLogLevel, "None")

/** With `relay: false`, nothing moves events: the admin routes' effects can be observed as they are. */
export interface LayerOptions {
  readonly relay?: boolean
}

const withRelay = <A, E, R>(stores: Layer.Layer<A, E, R>, options: LayerOptions) =>
  options.relay === false
    ? Layer.merge(stores, quiet)
    : Relay.layer(relayConfig).pipe(Layer.provideMerge(stores), Layer.provideMerge(quiet))

/** Memory stores, the memory broker and a relay. */
export const memoryLayer = (options: LayerOptions = {}) =>
  withRelay(
    Layer.mergeAll(MemoryOutboxStore.layer, MemorySagaStore.layer, MemoryInboxStore.layer, MemoryBroker.layer()),
    options
  )

/** A migrated schema for the runtime's life, dropped when it is disposed. */
const schemaLayer = (schema: string) =>
  Layer.effectDiscard(Effect.acquireRelease(
    Migrator.run({ schema }),
    () => SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(Effect.ignore)
  ))

/** Postgres stores on a fresh schema (over our PgClient), the memory broker and a relay; also exposes SqlClient. */
export const pgLayer = (schema = schemaName("hono"), options: LayerOptions = {}) => {
  const stores = Layer.mergeAll(
    PgOutboxStore.layer({ schema }),
    PgSagaStore.layer({ schema }),
    PgInboxStore.layer({ schema }),
    MemoryBroker.layer()
  )
  return withRelay(stores, options).pipe(
    Layer.provideMerge(schemaLayer(schema)),
    Layer.provideMerge(pgClientLayer())
  )
}

/** Polls `check` until it returns true (no cap a loaded machine can hit: see test/support/progress.ts). */
export const waitUntil = (
  check: () => Promise<boolean> | boolean,
  expectedMs = 10_000,
  what = "condition"
): Promise<void> => until(what, check, expectedMs)

/** One sample line. */
export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/** One family: its TYPE, HELP and samples. */
export interface Family {
  readonly type: string
  readonly help: string | undefined
  readonly samples: Array<Sample>
}

const metricName = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const labelName = /^[a-zA-Z_][a-zA-Z0-9_]*$/
const types = new Set(["counter", "gauge", "histogram", "summary", "untyped"])

const parseLabels = (text: string): Record<string, string> => {
  const labels: Record<string, string> = {}
  let i = 0
  while (i < text.length) {
    const eq = text.indexOf("=", i)
    if (eq < 0) throw new Error(`bad labels: ${text}`)
    const name = text.slice(i, eq)
    if (!labelName.test(name)) throw new Error(`bad label name: ${name}`)
    if (text[eq + 1] !== "\"") throw new Error(`label value not quoted: ${text}`)
    let j = eq + 2
    let value = ""
    for (; j < text.length && text[j] !== "\""; j++) {
      if (text[j] === "\\") {
        const next = text[++j]
        value += next === "n" ? "\n" : next
      } else value += text[j]
    }
    if (j >= text.length) throw new Error(`unterminated label value: ${text}`)
    if (name in labels) throw new Error(`duplicate label ${name}`)
    labels[name] = value
    i = j + 1
    if (text[i] === ",") i++
    else if (i < text.length) throw new Error(`bad label separator in ${text}`)
  }
  return labels
}

const parseValue = (s: string): number => {
  if (s === "+Inf") return Infinity
  if (s === "-Inf") return -Infinity
  if (s === "NaN") return NaN
  const n = Number(s)
  if (s === "" || Number.isNaN(n)) throw new Error(`bad sample value: ${s}`)
  return n
}

/** Parses the text exposition format 0.0.4; throws on anything malformed or a sample without its TYPE. */
export const parsePrometheus = (text: string): Map<string, Family> => {
  const families = new Map<string, Family>()
  if (text !== "" && !text.endsWith("\n")) throw new Error("the exposition must end with a newline")
  const familyOf = (name: string): string | undefined => {
    if (families.has(name)) return name
    for (const suffix of ["_bucket", "_sum", "_count"]) {
      if (name.endsWith(suffix)) {
        const base = name.slice(0, -suffix.length)
        const f = families.get(base)
        if (f !== undefined && (f.type === "histogram" || f.type === "summary")) return base
      }
    }
    return undefined
  }
  for (const line of text.split("\n")) {
    if (line === "") continue
    if (line.startsWith("# HELP ") || line.startsWith("# TYPE ")) {
      const [, kind, name, ...rest] = line.split(" ")
      if (name === undefined || !metricName.test(name)) throw new Error(`bad metric name in ${line}`)
      const existing = families.get(name)
      if (kind === "TYPE") {
        const type = rest.join(" ")
        if (!types.has(type)) throw new Error(`bad type in ${line}`)
        if (existing !== undefined && existing.samples.length > 0) throw new Error(`TYPE after samples for ${name}`)
        if (existing !== undefined && existing.type !== "") throw new Error(`second TYPE for ${name}`)
        families.set(name, { type, help: existing?.help, samples: existing?.samples ?? [] })
      } else {
        if (existing?.help !== undefined) throw new Error(`second HELP for ${name}`)
        families.set(name, { type: existing?.type ?? "", help: rest.join(" "), samples: existing?.samples ?? [] })
      }
      continue
    }
    if (line.startsWith("#")) continue
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (match === null) throw new Error(`bad sample line: ${line}`)
    const [, name, labelText, value] = match
    const family = familyOf(name!)
    if (family === undefined || families.get(family)!.type === "") throw new Error(`sample without TYPE: ${line}`)
    families.get(family)!.samples.push({
      name: name!,
      labels: labelText === undefined ? {} : parseLabels(labelText),
      value: parseValue(value!)
    })
  }
  return families
}

/** Sets the fixed-header JSON request init. */
export const json = (body: unknown, init: RequestInit = {}): RequestInit => ({
  ...init,
  method: init.method ?? "POST",
  headers: { "content-type": "application/json", ...(init.headers as Record<string, string> | undefined) },
  body: JSON.stringify(body)
})
