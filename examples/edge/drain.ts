/**
 * TEMPORARY — a stand-in for `Relay.drain` until it lands in `@tidings/core` (the relay's bounded
 * pass, being written on another branch with this signature). The lead swaps every use of
 * `drain` below for `Relay.drain` and deletes this file.
 *
 * Claim, publish and settle batches (`Relay.processBatch`) until nothing is due, `maxEvents` were
 * claimed, or `budget` is spent. It takes back expired leases first, as the relay's recovery loop
 * does; unlike the real `Relay.drain` it does not publish `suspect` events (those wait for a relay
 * that does).
 */
import type { InvalidConfig, StoreError } from "@tidings/core/Errors"
import * as Metrics from "@tidings/core/Metrics"
import { OutboxStore } from "@tidings/core/OutboxStore"
import type { Publisher } from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import { Clock, Duration, Effect, Metric } from "effect"

/** What a pass did. */
export interface DrainReport {
  readonly published: number
  readonly retried: number
  readonly failed: number
  readonly claimed: number
  /** Why it stopped: nothing was due, `maxEvents` were claimed, or the `budget` was spent. */
  readonly reason: "idle" | "max-events" | "budget"
}

/** Settings of a pass: the relay's, plus its bounds. */
export type DrainConfig = Relay.Config & {
  /** Claim at most this many events. */
  readonly maxEvents?: number
  /** Start no batch after this long. */
  readonly budget?: Duration.Input
}

// TEMPORARY: counts from the relay's own counters (processBatch reports only what it claimed).
const counters = Effect.all([Metric.value(Metrics.published), Metric.value(Metrics.retried), Metric.value(Metrics.failed)])

/** TEMPORARY stand-in for `Relay.drain` (see the module docs). */
export const drain = (config: DrainConfig = {}): Effect.Effect<DrainReport, InvalidConfig | StoreError, OutboxStore | Publisher> =>
  Effect.gen(function*() {
    const s = yield* Relay.settings({ ...config, dispatch: "poll" })
    const store = yield* OutboxStore
    const relayId = `${s.name}-drain-${Math.random().toString(36).slice(2, 8)}`
    const budget = config.budget === undefined ? undefined : Duration.toMillis(Duration.fromInputUnsafe(config.budget))
    const started = yield* Clock.currentTimeMillis
    const [published0, retried0, failed0] = yield* counters
    yield* store.reclaimExpired({ maxCrashes: s.maxCrashes })
    let claimed = 0
    let reason: DrainReport["reason"]
    while (true) {
      if (config.maxEvents !== undefined && claimed >= config.maxEvents) {
        reason = "max-events"
        break
      }
      if (budget !== undefined && (yield* Clock.currentTimeMillis) - started >= budget) {
        reason = "budget"
        break
      }
      const batchSize = config.maxEvents === undefined ? s.batchSize : Math.min(s.batchSize, config.maxEvents - claimed)
      const n = yield* Relay.processBatch({ ...s, batchSize }, relayId)
      claimed += n
      if (n === 0) {
        reason = "idle"
        break
      }
    }
    const [published1, retried1, failed1] = yield* counters
    return { published: published1.count - published0.count, retried: retried1.count - retried0.count, failed: failed1.count - failed0.count, claimed, reason }
  })
