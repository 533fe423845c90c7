/**
 * Command-line parsing shared by the benchmarks: `--flag`, `--flag value` and `--flag=value`, with
 * comma-separated lists for the matrix filters (`--relays 4,8 --batch 100,500`).
 * @module
 */

/** A bad command line; `main` prints the message and the usage, and exits with code 2. */
export class UsageError extends Error {}

/** Parsed flags: booleans for bare flags, strings for valued ones. */
export interface Flags {
  readonly positional: ReadonlyArray<string>
  readonly values: ReadonlyMap<string, string | true>
}

/** Flags that never take a value, so `--json claim` does not read `claim` as the value of `--json`. */
const booleanFlags = new Set(["json", "quick", "help", "h", "dry-run"])

/** Splits argv into positional arguments and flags. */
export const parse = (argv: ReadonlyArray<string>): Flags => {
  const positional: Array<string> = []
  const values = new Map<string, string | true>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === "--") continue // pnpm passes it through in `pnpm bench -- claim`
    if (!arg.startsWith("-")) {
      positional.push(arg)
      continue
    }
    const body = arg.replace(/^--?/, "")
    const eq = body.indexOf("=")
    if (eq >= 0) {
      values.set(body.slice(0, eq), body.slice(eq + 1))
    } else if (booleanFlags.has(body)) {
      values.set(body, true)
    } else {
      const next = argv[i + 1]
      if (next === undefined || next.startsWith("--")) throw new UsageError(`--${body} needs a value`)
      values.set(body, next)
      i++
    }
  }
  return { positional, values }
}

/** Reads flags, remembering which were used so that unknown ones can be reported. */
export class Reader {
  readonly #flags: Flags
  readonly #used = new Set<string>()
  constructor(flags: Flags) {
    this.#flags = flags
  }

  /** A boolean flag (`--json`). */
  bool(name: string): boolean {
    this.#used.add(name)
    const v = this.#flags.values.get(name)
    if (v === undefined) return false
    if (v === true || v === "true" || v === "1") return true
    if (v === "false" || v === "0") return false
    throw new UsageError(`--${name} takes no value`)
  }

  /** A positive number (`--duration 5`), or `undefined` when absent. */
  number(name: string): number | undefined {
    this.#used.add(name)
    const v = this.#flags.values.get(name)
    if (v === undefined) return undefined
    const n = v === true ? Number.NaN : Number(v)
    if (!Number.isFinite(n) || n <= 0) throw new UsageError(`--${name} must be a positive number, got ${String(v)}`)
    return n
  }

  /** A comma-separated list of positive integers (`--relays 4,8`), or `undefined` when absent. */
  integers(name: string): ReadonlyArray<number> | undefined {
    const list = this.strings(name)
    return list?.map((s) => {
      const n = Number(s)
      if (!Number.isInteger(n) || n <= 0) throw new UsageError(`--${name} must list positive integers, got ${s}`)
      return n
    })
  }

  /** A comma-separated list of words from `allowed`, or `undefined` when absent. */
  choices<T extends string>(name: string, allowed: ReadonlyArray<T>): ReadonlyArray<T> | undefined {
    return this.strings(name)?.map((s) => {
      if (!(allowed as ReadonlyArray<string>).includes(s)) {
        throw new UsageError(`--${name}: unknown value ${s} (one of ${allowed.join(", ")})`)
      }
      return s as T
    })
  }

  /** Fails on flags nobody asked for (typos should not silently run the full matrix). */
  rejectUnknown(): void {
    for (const name of this.#flags.values.keys()) {
      if (!this.#used.has(name)) throw new UsageError(`unknown option --${name}`)
    }
  }

  private strings(name: string): ReadonlyArray<string> | undefined {
    this.#used.add(name)
    const v = this.#flags.values.get(name)
    if (v === undefined) return undefined
    if (v === true) throw new UsageError(`--${name} needs a value`)
    const list = v.split(",").map((s) => s.trim()).filter((s) => s !== "")
    if (list.length === 0) throw new UsageError(`--${name} needs at least one value`)
    return list
  }
}
