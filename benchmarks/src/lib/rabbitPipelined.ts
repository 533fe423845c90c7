/**
 * An experimental relay for the latency comparison (`--relay pipelined`), not a product: it tests
 * whether a relay that never waits for confirms before claiming again gets closer to the broker's
 * own latency. Each poller claims a batch, hands it to the publisher in a fiber of its own (up to
 * `maxInFlight` batches outstanding) and is at once ready for the next wake-up; confirmed batches are
 * settled by the next claim (settle-and-claim in one statement) or, when nothing else is due, by a
 * plain settle. `Relay.layer`, by contrast, holds each batch until its confirms are in and only then
 * settles and claims the next, so an event committed meanwhile waits for a whole confirm round trip
 * or for another idle relay.
 *
 * Deliberately minimal: no leases renewal, reclaiming, metrics or shutdown handover; rejected
 * events are retried after a second.
 * @module
 */
import type * as OutboxStorePort from "@tidings/core/OutboxStore"
import type * as PublisherPort from "@tidings/core/Publisher"
import type * as Wakeup from "@tidings/core/Wakeup"
import { Duration, Effect, Queue, type Scope } from "effect"

/** Settings of {@link start}. */
export interface Options {
  readonly relays: number
  readonly batchSize: number
  /** Batches a poller may have published and not yet confirmed. */
  readonly maxInFlight: number
  readonly store: OutboxStorePort.Service
  readonly publisher: PublisherPort.Service
  readonly hub: Wakeup.Service
}

const lease = Duration.seconds(30)
const retryDelay = Duration.seconds(1)

type Woken = { readonly _tag: "signal" } | {
  readonly _tag: "confirmed"
  readonly results: ReadonlyArray<PublishResult>
}
type PublishResult = PublisherPort.PublishResult

const settlementOf = (results: ReadonlyArray<PublishResult>): OutboxStorePort.Settlement => ({
  published: results.flatMap((r) => (r._tag === "Published" ? [r.id] : [])),
  retry: results.flatMap((
    r
  ) => (r._tag === "Rejected" ? [{ id: r.id, delay: retryDelay, error: r.error.message }] : [])),
  failed: []
})

/** Starts `relays` pipelined pollers for as long as the scope lives. */
export const start = (opts: Options): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    for (let i = 0; i < opts.relays; i++) {
      const relayId = `pipelined-${i}`
      const mailbox = yield* opts.hub.subscribe
      const confirmed = yield* Queue.unbounded<ReadonlyArray<PublishResult>>()
      const claimOptions = { relayId, batchSize: opts.batchSize, lease }
      const loop = Effect.gen(function*() {
        let inFlight = 0
        let signalled = true // claim once at start
        const done: Array<PublishResult> = []
        while (true) {
          for (const results of yield* Queue.clear(confirmed)) {
            inFlight--
            done.push(...results)
          }
          if (signalled && inFlight < opts.maxInFlight) {
            signalled = false
            yield* mailbox.clear // signals so far are answered by this claim
            const settlement = settlementOf(done.splice(0))
            const claimed = yield* (settlement.published.length + settlement.retry.length === 0
              ? opts.store.claim(claimOptions)
              : opts.store.settleAndClaim(relayId, settlement, claimOptions)).pipe(Effect.orDie)
            if (claimed.length > 0) {
              inFlight++
              yield* opts.publisher.publish(claimed.map((c) => c.message)).pipe(
                Effect.catch((error) =>
                  Effect.succeed(claimed.map((c): PublishResult => ({ _tag: "Rejected", id: c.message.id, error })))
                ),
                Effect.flatMap((results) => Queue.offer(confirmed, results)),
                Effect.forkChild
              )
              // A full batch says more is waiting: claim again without waiting for a signal.
              if (claimed.length >= opts.batchSize) signalled = true
            }
            continue
          }
          if (done.length > 0 && !signalled) {
            // Nothing to claim: settle on its own rather than leave confirmed events marked processing.
            yield* opts.store.settle(relayId, settlementOf(done.splice(0))).pipe(Effect.orDie)
            continue
          }
          const woken: Woken = yield* Effect.raceFirst(
            Effect.as(mailbox.take, { _tag: "signal" } as const),
            Effect.map(Queue.take(confirmed), (results) => ({ _tag: "confirmed", results }) as const)
          )
          if (woken._tag === "signal") {
            signalled = true
          } else {
            inFlight--
            done.push(...woken.results)
          }
        }
      })
      yield* Effect.forkScoped(loop)
    }
  })
