/**
 * A seeded pseudo-random generator (mulberry32): the same seed gives the same fault plan, the same
 * targets and the same rollback choices, so a failing run can be replayed with `--seed`.
 * @module
 */

/** A source of numbers in [0, 1) and helpers over it. */
export interface Random {
  readonly seed: number
  /** A float in [0, 1). */
  readonly next: () => number
  /** A float in [min, max). */
  readonly between: (min: number, max: number) => number
  /** An integer in [min, max]. */
  readonly int: (min: number, max: number) => number
  /** One element of a non-empty list. */
  readonly pick: <A>(items: ReadonlyArray<A>) => A
  /** A shuffled copy. */
  readonly shuffle: <A>(items: ReadonlyArray<A>) => Array<A>
  /** A key chosen with probability proportional to its weight. */
  readonly weighted: <K extends string>(weights: Readonly<Record<K, number>>) => K
}

/** A generator for `seed` (any 32-bit integer). */
export const make = (seed: number): Random => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (min: number, max: number) => min + Math.floor(next() * (max - min + 1))
  return {
    seed,
    next,
    between: (min, max) => min + next() * (max - min),
    int,
    pick: (items) => {
      if (items.length === 0) throw new Error("pick from an empty list")
      return items[int(0, items.length - 1)]!
    },
    shuffle: (items) => {
      const copy = [...items]
      for (let i = copy.length - 1; i > 0; i--) {
        const j = int(0, i)
        ;[copy[i], copy[j]] = [copy[j]!, copy[i]!]
      }
      return copy
    },
    weighted: (weights) => {
      const entries = Object.entries(weights) as Array<[keyof typeof weights & string, number]>
      const total = entries.reduce((sum, [, w]) => sum + w, 0)
      let roll = next() * total
      for (const [key, w] of entries) {
        roll -= w
        if (roll < 0) return key
      }
      return entries[entries.length - 1]![0]
    }
  }
}

/** A fresh seed when none is given (printed, so the run can be repeated). */
export const freshSeed = (): number => Math.floor(Math.random() * 0x7fffffff)
