/**
 * A strict parser of the Prometheus text exposition format 0.0.4, for tests that scrape `/metrics`:
 * every line must be a `# HELP`, a `# TYPE` (before the family's samples, once) or a sample with a
 * valid name, well-formed labels and a number; otherwise it throws naming the line.
 */

/** One sample: `name{labels} value`. */
export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/** A parsed scrape. */
export interface Scrape {
  readonly samples: ReadonlyArray<Sample>
  /** Declared types by family name. */
  readonly types: ReadonlyMap<string, string>
  /** Samples of `name` whose labels include `labels`. */
  readonly find: (name: string, labels?: Readonly<Record<string, string>>) => ReadonlyArray<Sample>
  /** The sum of the values of {@link Scrape.find}. */
  readonly sum: (name: string, labels?: Readonly<Record<string, string>>) => number
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"])

const parseValue = (raw: string, line: string): number => {
  if (raw === "+Inf") return Infinity
  if (raw === "-Inf") return -Infinity
  if (raw === "NaN") return NaN
  if (!/^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$/.test(raw)) {
    throw new Error(`not a sample value: ${JSON.stringify(raw)} in ${JSON.stringify(line)}`)
  }
  return Number(raw)
}

/** Parses `{a="x",b="y\"z"}` starting at `text[0] === "{"`; returns the labels and the rest. */
const parseLabels = (text: string, line: string): { labels: Record<string, string>; rest: string } => {
  const labels: Record<string, string> = {}
  let i = 1
  const fail = (why: string): never => {
    throw new Error(`bad labels (${why}) in ${JSON.stringify(line)}`)
  }
  while (i < text.length && text[i] !== "}") {
    const eq = text.indexOf("=", i)
    if (eq < 0) fail("no =")
    const name = text.slice(i, eq)
    if (!LABEL.test(name)) fail(`label name ${JSON.stringify(name)}`)
    if (text[eq + 1] !== "\"") fail("unquoted value")
    let j = eq + 2
    let value = ""
    for (; j < text.length && text[j] !== "\""; j++) {
      if (text[j] === "\\") {
        const next = text[++j]
        value += next === "n" ? "\n" : next === "\\" ? "\\" : next === "\"" ? "\"" : fail(`escape \\${next}`)
      } else value += text[j]
    }
    if (j >= text.length) fail("unterminated value")
    if (name in labels) fail(`label ${name} twice`)
    labels[name] = value
    i = j + 1
    if (text[i] === ",") i++
    else if (text[i] !== "}") fail("expected , or }")
  }
  if (text[i] !== "}") fail("unterminated")
  return { labels, rest: text.slice(i + 1) }
}

const familyOf = (name: string, types: ReadonlyMap<string, string>) => {
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    const base = name.slice(0, -suffix.length)
    if (name.endsWith(suffix) && (types.get(base) === "histogram" || types.get(base) === "summary")) return base
  }
  return name
}

/** Parses a scrape; throws on the first malformed line. */
export const parse = (text: string): Scrape => {
  const samples: Array<Sample> = []
  const types = new Map<string, string>()
  const seenSamples = new Set<string>()
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line)
      if (m === null) continue // other comments are allowed
      const [, kind, name, rest] = m
      if (!NAME.test(name!)) throw new Error(`bad metric name in ${JSON.stringify(line)}`)
      if (kind === "TYPE") {
        if (!TYPES.has(rest ?? "")) throw new Error(`unknown type in ${JSON.stringify(line)}`)
        if (types.has(name!)) throw new Error(`second TYPE line for ${name}`)
        if (seenSamples.has(name!)) throw new Error(`TYPE for ${name} after its samples`)
        types.set(name!, rest!)
      }
      continue
    }
    const nameMatch = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)
    if (nameMatch === null) throw new Error(`bad sample line ${JSON.stringify(line)}`)
    const name = nameMatch[0]
    let rest = line.slice(name.length)
    let labels: Record<string, string> = {}
    if (rest.startsWith("{")) ({ labels, rest } = parseLabels(rest, line))
    const parts = rest.trim().split(/\s+/)
    if (!rest.startsWith(" ") || parts.length < 1 || parts.length > 2) {
      throw new Error(`bad sample line ${JSON.stringify(line)}`)
    }
    const value = parseValue(parts[0]!, line)
    if (parts[1] !== undefined && !/^-?\d+$/.test(parts[1])) throw new Error(`bad timestamp in ${JSON.stringify(line)}`)
    seenSamples.add(familyOf(name, types))
    samples.push({ name, labels, value })
  }
  const find = (name: string, labels: Readonly<Record<string, string>> = {}) =>
    samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
  return { samples, types, find, sum: (name, labels) => find(name, labels).reduce((n, s) => n + s.value, 0) }
}
