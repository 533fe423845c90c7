/**
 * At most `max` promises at once, first come first served: an endpoint's concurrency. Plain promises
 * rather than an Effect semaphore: it sits on the per-request path, whose cost is the driver's.
 */
export class Limiter {
  #active = 0
  readonly #waiting: Array<() => void> = []
  readonly max: number
  constructor(max: number) {
    this.max = max
  }

  async run<A>(f: () => Promise<A>): Promise<A> {
    if (this.#active < this.max) this.#active++
    else await new Promise<void>((resume) => this.#waiting.push(resume)) // the slot is handed over
    try {
      return await f()
    } finally {
      const next = this.#waiting.shift()
      if (next !== undefined) next()
      else this.#active--
    }
  }
}
