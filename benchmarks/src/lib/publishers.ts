/**
 * Publisher wrappers that observe what the relay publishes, in front of the in-memory broker.
 * @module
 */
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import { Publisher } from "@tidings/core/Publisher"
import type * as PublisherPort from "@tidings/core/Publisher"
import { Context, Effect, Layer, type Scope } from "effect"

/** The memory broker's publisher, not recording deliveries (a benchmark would only fill memory). */
export const memoryPublisher: Effect.Effect<PublisherPort.Service, never, Scope.Scope> = Effect.map(
  Layer.build(MemoryBroker.layer({ record: false })),
  (context) => Context.get(context, Publisher)
)

/** Counts processed ids and distinct ids, to detect events handled twice. */
export class Tally {
  readonly #ids = new Set<string>()
  #total = 0
  #waiting: Array<{ readonly n: number; readonly resume: () => void }> = []
  /** Records ids as processed once more. */
  add(ids: Iterable<string>): void {
    for (const id of ids) {
      this.#total++
      this.#ids.add(id)
    }
    if (this.#waiting.length > 0) {
      this.#waiting.filter((w) => w.n <= this.#total).forEach((w) => w.resume())
      this.#waiting = this.#waiting.filter((w) => w.n > this.#total)
    }
  }
  /**
   * Resolves once `n` ids were recorded (duplicates included): a wait that costs the measured
   * process nothing, where polling every millisecond cost it tens of µs of CPU per event.
   */
  reached(n: number): Effect.Effect<void> {
    return Effect.promise(() =>
      this.#total >= n ? Promise.resolve() : new Promise<void>((resume) => this.#waiting.push({ n, resume }))
    )
  }
  /** Processed ids, duplicates included. */
  get total(): number {
    return this.#total
  }
  /** How many of them were repeats. */
  get duplicates(): number {
    return this.#total - this.#ids.size
  }
}

/** Wraps `inner`, adding every id it confirms to `tally`. */
export const counting = (inner: PublisherPort.Service, tally: Tally): PublisherPort.Service =>
  Publisher.of({
    publish: (messages) =>
      Effect.tap(inner.publish(messages), (results) =>
        Effect.sync(() => tally.add(results.flatMap((r) => (r._tag === "Published" ? [r.id] : [])))))
  })

/**
 * Wraps `inner` and calls `onConfirmed(id, now)` for each message the broker confirmed, with
 * `now = performance.now()` taken when the broker's publish returned (the broker received it).
 */
export const timing = (
  inner: PublisherPort.Service,
  onConfirmed: (id: string, at: number) => void
): PublisherPort.Service =>
  Publisher.of({
    publish: (messages) =>
      Effect.tap(inner.publish(messages), (results) =>
        Effect.sync(() => {
          const at = performance.now()
          for (const r of results) if (r._tag === "Published") onConfirmed(r.id, at)
        }))
  })
