/**
 * `Relay.drain`: the relay as a bounded run instead of a long-lived layer, for hosts that run code
 * per request or per schedule (serverless functions, workers, cron jobs). It takes back expired
 * leases and publishes suspects first, then claims, publishes and settles until nothing is due, or
 * `maxEvents` events were claimed, or the time budget is spent; what it still holds then is
 * released (not counted), so nothing waits for a lease.
 * @internal
 */
import { Deferred, Duration, Effect, Option, Schema, Semaphore } from "effect"
import type { InvalidConfig, StoreError } from "../../Errors.ts"
import { OutboxStore, type Settlement } from "../../OutboxStore.ts"
import { Publisher } from "../../Publisher.ts"
import * as SettingsCodec from "../../Settings.ts"
import { awaitPublisher, nextPause, pause } from "./availability.ts"
import { claimOptions } from "./poller.ts"
import { isEmpty, publishHeld, settle } from "./publish.ts"
import { recoverCrashed } from "./recovery.ts"
import { type Config, settings } from "./settings.ts"

/**
 * Options of `Relay.drain`: the relay's settings (those of the long-running layer that apply to a
 * bounded run: batch size, concurrency, ordering, lease, retry schedule, attempts, crash guard,
 * publish timeout), plus its bounds.
 * @since 0.1.0
 * @category models
 */
export interface DrainConfig extends Config {
  /** Claim at most this many events (suspects included); default: no limit. */
  readonly maxEvents?: number
  /**
   * Stop claiming after this long; in-flight publishes are then interrupted and their events
   * released. Default: no limit (an unavailable publisher is then waited for).
   */
  readonly budget?: Duration.Input
}

/**
 * What a drain did. `reason`: `idle` (nothing was due any more), `max-events` (it claimed
 * `maxEvents`), `budget` (the time ran out).
 * @since 0.1.0
 * @category models
 */
export interface DrainReport {
  readonly published: number
  readonly retried: number
  readonly failed: number
  readonly claimed: number
  readonly reason: "idle" | "max-events" | "budget"
}

const Bounds = Schema.Struct({
  maxEvents: Schema.optional(SettingsCodec.int(1, Number.MAX_SAFE_INTEGER)),
  budget: Schema.optional(SettingsCodec.duration())
})

const randomId = () => Math.random().toString(36).slice(2, 8)

/**
 * Drains the outbox once (see the module). Fails with `InvalidConfig` for bad settings and with
 * `StoreError` when the database fails (after releasing what it holds).
 * @since 0.1.0
 * @category constructors
 */
export const drain = (
  config: DrainConfig = {}
): Effect.Effect<DrainReport, InvalidConfig | StoreError, OutboxStore | Publisher> =>
  Effect.gen(function*() {
    const { budget: budgetInput, maxEvents: maxInput, ...relayConfig } = config
    const bounds = yield* SettingsCodec.decode(Bounds, { maxEvents: maxInput, budget: budgetInput })
    const s = yield* settings(relayConfig)
    const store = yield* OutboxStore
    const publisher = yield* Publisher
    const maxEvents = bounds.maxEvents ?? Number.POSITIVE_INFINITY
    const group = `${s.name}-${randomId()}-drain`
    const report = { published: 0, retried: 0, failed: 0, claimed: 0 }
    const count = (settlement: Settlement) => {
      report.published += settlement.published.length
      report.retried += settlement.retry.length
      report.failed += settlement.failed.length
    }
    // Ends the waits for an unavailable publisher when the budget is spent (never otherwise).
    const never = yield* Deferred.make<void>()

    const work = Effect.gen(function*() {
      // Expired leases first: a crashed relay's events are suspects, published alone.
      const recovered = yield* recoverCrashed({
        settings: s,
        relayId: `${group}-recovery`,
        store,
        publisher,
        stop: never,
        limit: maxEvents
      })
      report.claimed += recovered.claimed
      report.published += recovered.published
      report.retried += recovered.retried
      report.failed += recovered.failed + recovered.settledFailed
      let remaining = maxEvents - recovered.claimed
      const claims = yield* Semaphore.make(s.claimConcurrency)
      const worker = (relayId: string) =>
        Effect.uninterruptibleMask((restore) =>
          Effect.gen(function*() {
            let afterKey: string | undefined
            let unavailableFor = Duration.zero
            while (remaining > 0) {
              if (!(yield* restore(awaitPublisher(publisher, never)))) return
              const want = Math.min(s.batchSize, remaining)
              remaining -= want
              const claim = (from: string | undefined) =>
                claims.withPermits(1)(store.claim({ ...claimOptions(s, relayId, from), batchSize: want }))
              let held = yield* claim(afterKey)
              // per-key walks the keys from after the last one it took; at the end, once from the start
              if (held.length === 0 && afterKey !== undefined) held = yield* claim(undefined)
              remaining += want - held.length
              report.claimed += held.length
              if (held.length === 0) return
              const outcome = yield* publishHeld(restore, store, publisher, held, s, relayId)
              if (s.ordering === "per-key") afterKey = held[held.length - 1]!.message.orderingKey
              if (!isEmpty(outcome.settlement)) {
                yield* settle(s, relayId, outcome.settlement, store.settle(relayId, outcome.settlement))
              }
              count(outcome.settlement)
              // Released events were not attempted (the publisher was unavailable, or per key they
              // wait behind a failed event): not counted, and claimed again later.
              const released = outcome.settlement.released?.length ?? 0
              remaining += released
              report.claimed -= released
              if (outcome.unavailable) {
                unavailableFor = nextPause(unavailableFor)
                yield* restore(pause(unavailableFor, never))
              } else {
                unavailableFor = Duration.zero
              }
            }
          })
        )
      yield* Effect.forEach(Array.from({ length: s.concurrency }, (_, i) => `${group}-${i}`), worker, {
        concurrency: "unbounded",
        discard: true
      })
      return remaining <= 0 ? "max-events" as const : "idle" as const
    })

    const budget = bounds.budget
    const reason = budget === undefined
      ? yield* work
      : Option.getOrElse(yield* Effect.timeoutOption(work, budget), () => "budget" as const)
    return { ...report, reason } satisfies DrainReport
  }).pipe(Effect.withSpan("tidings.relay.drain"))
