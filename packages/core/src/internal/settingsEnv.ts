/**
 * Environment variables from a component's settings schema: which variables a schema reads
 * (walking its encoded side: nested structs become `PREFIX_PARENT_CHILD`), how a variable's text
 * becomes the value the schema decodes (numbers, booleans, durations, lists, `false` for "off"),
 * and how the issues of a decode are named by variable. Object config and environment config go
 * through the same schema, so they can never disagree.
 * @internal
 */
import { Config, Duration, Effect, Exit, Option, Schema, SchemaAST } from "effect"

/** One problem: the variable (or option path) and what is wrong. */
export interface Issue {
  readonly path: string
  readonly message: string
}

/** The annotation that tells the environment reader how to read a declared field. */
export const envAnnotation = "tidings.env"

/** How a variable's text is read. */
export type Kind = "string" | "number" | "boolean" | "duration" | "secret" | "literal" | "switch"

/** One variable of a schema. */
export interface Variable {
  /** `TIDINGS_RELAY_POLL_INTERVAL_MIN` */
  readonly name: string
  /** The option's path in the object config: `pollInterval.min`. */
  readonly path: ReadonlyArray<string>
  readonly kind: Kind
  /** A comma-separated list of `kind` values. */
  readonly list: boolean
  /** Accepts `false` (or `off`) for "turned off". */
  readonly allowsFalse: boolean
  /** The allowed values of a `literal` variable. */
  readonly literals: ReadonlyArray<string>
  readonly required: boolean
  readonly description: string | undefined
}

/**
 * Variable names that differ from `PREFIX_PATH`, by option path (`schema` → `TIDINGS_SCHEMA`, one
 * variable shared by every store); `false`: the option has no variable (set in code only).
 */
export type Names = Readonly<Record<string, string | false>>

/** `pollInterval` → `POLL_INTERVAL`. */
export const screaming = (key: string): string =>
  key.replace(/([a-z0-9])([A-Z])/g, "$1_$2").replace(/[^A-Za-z0-9]+/g, "_").toUpperCase()

/** The variable name of an option path under `prefix`. */
export const envName = (prefix: string, path: ReadonlyArray<string>): string =>
  [prefix, ...path.map(screaming)].filter((p) => p !== "").join("_")

const description = (ast: SchemaAST.AST): string | undefined => {
  const text = SchemaAST.resolveDescription(ast)
  return typeof text === "string" && text !== "" ? text : undefined
}

const kindOfDeclaration = (ast: SchemaAST.Declaration): Kind | undefined => {
  const tagged = ast.annotations?.[envAnnotation]
  if (tagged === "duration" || tagged === "secret" || tagged === "string" || tagged === "number") return tagged
  return undefined
}

interface Leaf {
  kind: Kind | undefined
  list: boolean
  allowsFalse: boolean
  literals: Array<string>
  objects: Array<SchemaAST.Objects>
}

const classify = (ast: SchemaAST.AST, leaf: Leaf, inList = false): void => {
  switch (ast._tag) {
    case "Undefined":
    case "Null":
      return
    case "String":
    case "TemplateLiteral":
      leaf.kind ??= "string"
      return
    case "Number":
      leaf.kind = leaf.kind === "duration" ? "duration" : "number"
      return
    case "Boolean":
      leaf.kind ??= "boolean"
      return
    case "Literal":
      if (ast.literal === false) leaf.allowsFalse = true
      else if (typeof ast.literal === "boolean") leaf.kind ??= "boolean"
      else {
        leaf.literals.push(String(ast.literal))
        leaf.kind ??= "literal"
      }
      return
    case "Enum":
      for (const [, value] of ast.enums) leaf.literals.push(String(value))
      leaf.kind ??= "literal"
      return
    case "Declaration": {
      const kind = kindOfDeclaration(ast)
      if (kind !== undefined) leaf.kind = kind
      return
    }
    case "Union":
      for (const member of ast.types) classify(member, leaf, inList)
      return
    case "Objects":
      if (!inList) leaf.objects.push(ast)
      return
    case "Arrays":
      if (inList || ast.rest.length !== 1) return
      leaf.list = true
      classify(ast.rest[0]!, leaf, true)
      return
    case "Suspend":
      return classify(ast.thunk(), leaf, inList)
    default:
      return
  }
}

/**
 * Every variable `schema` (a `Schema.Struct`) reads under `prefix`. Fields that are not data (a
 * `Schedule`, a function, a topology) have no variable: they are set in code only.
 */
export const variables = (schema: Schema.Top, prefix: string, names: Names = {}): ReadonlyArray<Variable> => {
  const out: Array<Variable> = []
  const walk = (objects: SchemaAST.Objects, path: ReadonlyArray<string>, parentOptional: boolean) => {
    for (const ps of objects.propertySignatures) {
      if (typeof ps.name !== "string") continue
      const here = [...path, ps.name]
      const leaf: Leaf = { kind: undefined, list: false, allowsFalse: false, literals: [], objects: [] }
      classify(ps.type, leaf)
      const optional = parentOptional || SchemaAST.isOptional(ps.type)
      // A scalar (possibly also accepting `false`), or the off switch of a `false | { ... }` group.
      const kind: Kind | undefined = leaf.kind ??
        (leaf.allowsFalse ? (leaf.objects.length > 0 ? "switch" : "boolean") : undefined)
      const renamed = names[here.join(".")]
      if (renamed === false) continue
      if (kind !== undefined) {
        out.push({
          name: renamed ?? envName(prefix, here),
          path: here,
          kind,
          list: leaf.list,
          allowsFalse: leaf.allowsFalse,
          literals: leaf.literals,
          required: !optional && !leaf.allowsFalse && leaf.objects.length === 0,
          description: description(ps.type)
        })
      }
      for (const nested of leaf.objects) walk(nested, here, optional)
    }
  }
  const encoded = SchemaAST.toEncoded(schema.ast)
  if (SchemaAST.isObjects(encoded)) walk(encoded, [], false)
  return out
}

const numeric = /^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$/i
const falsy = new Set(["false", "off"])

const scalar = (variable: Variable, text: string): unknown => {
  const value = text.trim()
  if (variable.allowsFalse && falsy.has(value.toLowerCase())) return false
  switch (variable.kind) {
    case "number":
      return numeric.test(value) ? Number(value) : value
    case "boolean": {
      const lower = value.toLowerCase()
      if (["true", "1", "yes", "on"].includes(lower)) return true
      if (["false", "0", "no", "off"].includes(lower)) return false
      return value
    }
    case "duration":
      // A bare number is milliseconds, as in object config.
      return numeric.test(value) ? Number(value) : value
    case "switch":
      // `true` keeps the group on (its defaults, or its own variables); only `false` changes it.
      return ["true", "1", "yes", "on"].includes(value.toLowerCase()) ? undefined : value
    case "secret":
      // As given (no trimming: a password may end in a space).
      return text
    default:
      return value
  }
}

/** The value `variable` contributes to the input object, from its text. */
export const parse = (variable: Variable, text: string): unknown =>
  variable.list
    ? text.split(",").map((item) => item.trim()).filter((item) => item !== "").map((item) => scalar(variable, item))
    : scalar(variable, text)

const setAt = (target: Record<string, unknown>, path: ReadonlyArray<string>, value: unknown) => {
  let node = target
  for (const key of path.slice(0, -1)) {
    const next = node[key]
    if (typeof next !== "object" || next === null) node[key] = {}
    node = node[key] as Record<string, unknown>
  }
  node[path[path.length - 1]!] = value
}

const getAt = (source: unknown, path: ReadonlyArray<string>): unknown => {
  let node = source
  for (const key of path) {
    if (typeof node !== "object" || node === null) return undefined
    node = (node as Record<string, unknown>)[key]
  }
  return node
}

/**
 * Reads the variables of `schema` under `prefix` with Effect's `Config` (the current
 * `ConfigProvider`, by default the process environment) into the input object the schema decodes:
 * the values set in code (`defaults`) with every variable that is set on top.
 */
export const readInput = (
  schema: Schema.Top,
  prefix: string,
  defaults: unknown,
  names: Names = {}
): Effect.Effect<
  { readonly input: Record<string, unknown>; readonly texts: ReadonlyMap<string, string> },
  ReadonlyArray<Issue>
> =>
  Effect.gen(function*() {
    const vars = variables(schema, prefix, names)
    const input: Record<string, unknown> = typeof defaults === "object" && defaults !== null
      ? structuredCloneShallow(defaults as Record<string, unknown>)
      : {}
    const given = new Map<string, string>()
    const texts = yield* Effect.forEach(vars, (v) =>
      Effect.map(Config.option(Config.String(v.name)), (o) => [v, o] as const)).pipe(
        Effect.catch((error) =>
          Effect.fail(configError(prefix, error))
        )
      )
    for (const [variable, text] of texts) {
      if (Option.isNone(text) || text.value === "") continue
      const value = parse(variable, text.value)
      if (value === undefined) continue
      // `RETENTION=false` turns the whole group off; otherwise a group's variables fill it in.
      const parent = getAt(input, variable.path.slice(0, -1))
      if (parent === false) continue
      setAt(input, variable.path, value)
      given.set(variable.name, text.value)
    }
    return { input, texts: given }
  })

const structuredCloneShallow = (value: Record<string, unknown>): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const [key, v] of Object.entries(value)) {
    out[key] = typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype
      ? structuredCloneShallow(v as Record<string, unknown>)
      : v
  }
  return out
}

const configError = (prefix: string, error: unknown): ReadonlyArray<Issue> => [
  {
    path: prefix,
    message: `the configuration could not be read: ${String((error as { message?: unknown })?.message ?? error)}`
  }
]

/**
 * Names the issues of an `InvalidConfig` (paths of the object config, `pollInterval.min`) by their
 * variables (`TIDINGS_RELAY_POLL_INTERVAL_MIN`); a path above the variables (a group such as
 * `pollInterval`) is named `TIDINGS_RELAY_POLL_INTERVAL_*`.
 */
export const renameIssues = (
  schema: Schema.Top,
  prefix: string,
  issues: ReadonlyArray<Issue>,
  texts: ReadonlyMap<string, string> = new Map(),
  names: Names = {}
): ReadonlyArray<Issue> => {
  const vars = variables(schema, prefix, names)
  const byPath = new Map(vars.map((v) => [v.path.join("."), v]))
  return issues.map((issue) => {
    const keys = issue.path === "" ? [] : issue.path.split(".")
    // `retryDelays.1` names the list's variable.
    for (let n = keys.length; n > 0; n--) {
      const variable = byPath.get(keys.slice(0, n).join("."))
      if (variable !== undefined) {
        const item = n < keys.length && /^\d+$/.test(keys[n]!) ? ` (item ${Number(keys[n]) + 1})` : ""
        return { path: variable.name, message: `${reword(issue.message, variable, texts.get(variable.name))}${item}` }
      }
    }
    return {
      path: keys.length === 0 ? prefix : `${envName(prefix, keys)}_*`,
      message: reword(issue.message, undefined, undefined)
    }
  })
}

// Schema's wording is about values in code ("Expected number | undefined"); a variable is text, so
// say what was given (never for a secret).
const reword = (message: string, variable: Variable | undefined, text: string | undefined): string => {
  if (message === "Missing key") return "is required but not set"
  const cleaned = message.replace(/ \| undefined$/, "")
  if (variable === undefined || text === undefined || variable.kind === "secret" || /\bgot\b/.test(cleaned)) {
    return cleaned
  }
  return `${cleaned}, got ${JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}...` : text)}`
}

/**
 * The default of each variable, as users would write it (`30 seconds`, `100`, `false`), found by
 * decoding each top-level field alone from nothing. Derived defaults (computed from other options
 * after decoding) have none.
 */
export const defaults = (
  schema: Schema.Top & { readonly fields?: Schema.Struct.Fields },
  prefix: string,
  names: Names = {}
): ReadonlyMap<string, string> => {
  const out = new Map<string, string>()
  const fields = schema.fields
  if (fields === undefined) return out
  for (const [key, field] of Object.entries(fields)) {
    const exit = Schema.decodeUnknownExit(
      Schema.Struct({ [key]: field }) as unknown as Schema.Codec<Record<string, unknown>, unknown>
    )({})
    if (!Exit.isSuccess(exit)) continue
    const visit = (value: unknown, path: ReadonlyArray<string>) => {
      if (value === undefined) return
      if (typeof value === "object" && value !== null && Object.getPrototypeOf(value) === Object.prototype) {
        for (const [k, v] of Object.entries(value)) visit(v, [...path, k])
        return
      }
      const renamed = names[path.join(".")]
      if (renamed !== false) out.set(renamed ?? envName(prefix, path), display(value))
    }
    visit(exit.value[key], [key])
  }
  return out
}

const units: ReadonlyArray<readonly [number, string]> = [
  [86_400_000, "days"],
  [3_600_000, "hours"],
  [60_000, "minutes"],
  [1000, "seconds"],
  [1, "millis"]
]

/** A value as it would be written in a variable. */
export const display = (value: unknown): string => {
  if (Duration.isDuration(value)) {
    const ms = Duration.toMillis(value)
    if (ms === 0) return "0"
    const unit = units.find(([size]) => ms % size === 0) ?? [1, "millis"]
    const n = ms / unit[0]
    return `${n} ${n === 1 ? unit[1].replace(/s$/, "") : unit[1]}`
  }
  if (Array.isArray(value)) return value.map(display).join(",")
  return String(value)
}
