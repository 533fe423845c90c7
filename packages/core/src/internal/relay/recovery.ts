/**
 * Lease recovery: events whose relay died (or hung) mid-publish are taken back when their lease
 * expires, as `suspect`s (or as failed by the crash-loop guard, once `maxCrashes` publish attempts
 * started and none finished), and suspects are published one at a time, so that a poison event
 * crashes no batch but its own.
 * @internal
 */
import { Deferred, Effect, Metric } from "effect"
import * as Metrics from "../../Metrics.ts"
import type { OutboxStore } from "../../OutboxStore.ts"
import type { Publisher } from "../../Publisher.ts"
import { awaitPublisher } from "./availability.ts"
import { publishHeld, settle } from "./publish.ts"
import type { Settings } from "./settings.ts"

/** What one recovery round did. */
export interface Recovered {
  /** Expired claims made suspects. */
  readonly suspect: number
  /** Expired claims failed by the crash-loop guard. */
  readonly failed: number
  /** Suspects claimed and published (or settled otherwise) in this round. */
  readonly claimed: number
  readonly published: number
  readonly retried: number
  readonly settledFailed: number
}

/**
 * Takes back expired leases, then publishes up to `limit` suspects one at a time (fewer when the
 * publisher becomes unavailable: the suspect goes back, not counted). `stop` ends it early.
 */
export const recoverCrashed = (options: {
  readonly settings: Settings
  readonly relayId: string
  readonly store: OutboxStore["Service"]
  readonly publisher: Publisher["Service"]
  readonly stop?: Deferred.Deferred<void>
  readonly limit?: number
}) =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const { publisher, relayId, settings: s, store } = options
      const stop = options.stop ?? (yield* Deferred.make<void>())
      const reclaimed = yield* store.reclaimExpired({ maxCrashes: s.maxCrashes })
      const done = {
        suspect: reclaimed.suspect,
        failed: reclaimed.failed,
        claimed: 0,
        published: 0,
        retried: 0,
        settledFailed: 0
      }
      if (reclaimed.suspect + reclaimed.failed > 0) {
        yield* Metric.update(Metrics.reclaimed, reclaimed.suspect + reclaimed.failed)
        yield* Effect.logWarning(
          `took back ${reclaimed.suspect + reclaimed.failed} events whose relay stopped mid-publish`
        )
      }
      if (reclaimed.failed > 0) {
        yield* Metric.update(Metrics.failed, reclaimed.failed)
        yield* Effect.logError(
          `${reclaimed.failed} events failed for good: their publish crashed the relay ${s.maxCrashes} times`
        )
      }
      // Bounded per round; alone, so that a poison event crashes no batch but its own.
      for (let i = 0; i < (options.limit ?? 20); i++) {
        if (!(yield* restore(awaitPublisher(publisher, stop)))) break
        const suspect = yield* store.claimSuspect({ relayId, lease: s.lease, ordering: s.ordering })
        if (suspect === undefined) break
        done.claimed++
        // Traced even in the untraced background round: a publish is worth its send span.
        const outcome = yield* Effect.withTracerEnabled(
          Effect.tap(
            publishHeld(restore, store, publisher, [suspect], s, relayId),
            (o) => settle(s, relayId, o.settlement, store.settle(relayId, o.settlement))
          ),
          true
        )
        done.published += outcome.settlement.published.length
        done.retried += outcome.settlement.retry.length
        done.settledFailed += outcome.settlement.failed.length
        if (outcome.unavailable) {
          break
        }
      }
      return done satisfies Recovered
    })
  )
