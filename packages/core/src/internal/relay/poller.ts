/**
 * One poller of a relay group: claim; then, while it holds events, publish them and settle them in
 * the statement that claims the next batch. It waits (adaptively, or until woken) only when it
 * holds nothing, pauses while the publisher or the database is unavailable, and only the waits and
 * the publish can be interrupted: a claim is never dropped on the floor.
 * @internal
 */
import { Cause, Deferred, Duration, Effect, Exit, type Semaphore } from "effect"
import type { ClaimedEvent, ClaimOptions, OutboxStore } from "../../OutboxStore.ts"
import type { Publisher } from "../../Publisher.ts"
import type { Mailbox } from "../../Wakeup.ts"
import type { Claimer } from "../claimCoalescer.ts"
import * as MessagingSpans from "../messagingSpans.ts"
import { awaitPublisher, nextPause, pause } from "./availability.ts"
import { publishHeld, settle } from "./publish.ts"
import type { Settings } from "./settings.ts"

/** What the pollers of a group are doing, counted as they go (`Relay.status`). */
export interface Counters {
  running: number
  idle: number
  paused: number
  claims: number
}

/** Claim options of a poller. */
export const claimOptions = (s: Settings, relayId: string, afterKey: string | undefined): ClaimOptions => ({
  relayId,
  batchSize: s.batchSize,
  lease: s.lease,
  ordering: s.ordering,
  ...(afterKey === undefined ? {} : { afterKey })
})

/** A poller claiming on its own, at most `claimConcurrency` of the group's claims at once. */
export const ownClaims = (
  s: Settings,
  store: OutboxStore["Service"],
  relayId: string,
  claims: Semaphore.Semaphore
): Claimer => ({
  holder: relayId,
  claim: (afterKey) =>
    store.claim(claimOptions(s, relayId, afterKey)).pipe(
      // per-key walks the keys from after the last one it took; at the end, wrap around at once
      Effect.flatMap((got) =>
        got.length === 0 && afterKey !== undefined
          ? store.claim(claimOptions(s, relayId, undefined))
          : Effect.succeed(got)
      ),
      claims.withPermits(1)
    ),
  settleAndClaim: (settlement, afterKey) =>
    claims.withPermits(1)(store.settleAndClaim(relayId, settlement, claimOptions(s, relayId, afterKey)))
})

const min = (a: Duration.Duration, b: Duration.Duration) => Duration.isLessThan(a, b) ? a : b

/** Next poll delay from the last batch's size (adaptive polling). */
const nextDelay = (s: Settings, previous: Duration.Duration, claimed: number | "error"): Duration.Duration => {
  if (claimed === "error") return min(Duration.max(Duration.times(previous, 2), s.pollBase), s.pollMax)
  if (claimed >= s.batchSize) return s.pollMin
  if (claimed > 0) return s.pollBase
  return Duration.isLessThan(previous, s.pollBase) ? s.pollBase : min(Duration.times(previous, 2), s.pollMax)
}

/** Everything a poller works with. */
export interface Poller {
  readonly settings: Settings
  readonly relayId: string
  readonly store: OutboxStore["Service"]
  readonly publisher: Publisher["Service"]
  readonly stop: Deferred.Deferred<void>
  readonly mailbox: Mailbox
  readonly claimer: Claimer
  readonly counters: Counters
}

/** Runs one poller until `stop` completes (or it is interrupted, releasing what it holds). */
export const pollerLoop = ({ claimer, counters, mailbox, publisher, relayId, settings: s, stop, store }: Poller) =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const holder = claimer.holder
      let held: ReadonlyArray<ClaimedEvent> = []
      let afterKey: string | undefined
      let delay = s.pollBase
      let lastClaim = 0
      let unavailableFor = Duration.zero
      let failing = false
      const log = (message: string, cause: Cause.Cause<unknown>) =>
        // The first failure of a streak is a warning; the rest of an outage would only repeat it.
        (failing ? Effect.logDebug(message, cause) : Effect.logWarning(message, cause)).pipe(
          Effect.annotateLogs({ relayId }),
          Effect.andThen(Effect.sync(() => void (failing = true)))
        )
      const recovered = Effect.suspend(() => {
        if (!failing) return Effect.void
        failing = false
        return Effect.logInfo("relay store calls succeed again").pipe(Effect.annotateLogs({ relayId }))
      })
      const waitForWork = Effect.gen(function*() {
        counters.idle++
        const woken = yield* restore(Effect.raceAll([
          Effect.as(Effect.sleep(delay), "poll" as const),
          mailbox.take,
          Effect.as(Deferred.await(stop), "stop" as const)
        ])).pipe(Effect.ensuring(Effect.sync(() => void counters.idle--)))
        if (woken === "local" || woken === "notify") delay = s.pollBase
      })
      while (true) {
        if (held.length === 0) {
          if (yield* Deferred.isDone(stop)) return
          // Nothing is claimed while the publisher cannot take it: an outage counts no attempt.
          const available = yield* restore(awaitPublisher(publisher, stop, counters))
          if (!available) return
          yield* mailbox.clear // signals so far are answered by this claim
          counters.claims++
          const claimed = yield* Effect.exit(claimer.claim(afterKey).pipe(MessagingSpans.claim(relayId, s.batchSize)))
          if (Exit.isFailure(claimed)) {
            if (Cause.hasInterruptsOnly(claimed.cause)) return yield* Effect.failCause(claimed.cause)
            // The database is away (or the claim broke): back off, capped at the longest poll interval.
            yield* log("relay claim failed; backing off", claimed.cause)
            delay = nextDelay(s, delay, "error")
          } else {
            yield* recovered
            held = claimed.value
            lastClaim = held.length
            delay = nextDelay(s, delay, held.length)
          }
          if (held.length === 0) {
            afterKey = undefined
            yield* waitForWork
            continue
          }
        }
        const outcome = yield* publishHeld(restore, store, publisher, held, s, relayId, holder)
        if (s.ordering === "per-key") afterKey = held[held.length - 1]!.message.orderingKey
        if (outcome.unavailable) {
          // The publisher went away: give back what it did not take (not counted), write the rest,
          // and pause before claiming again.
          const written = yield* Effect.exit(
            settle(s, relayId, outcome.settlement, store.settle(holder, outcome.settlement))
          )
          if (Exit.isFailure(written)) {
            yield* log("relay settle failed; its events will be reclaimed after the lease", written.cause)
          }
          held = []
          unavailableFor = nextPause(unavailableFor)
          yield* restore(pause(unavailableFor, stop))
          continue
        }
        unavailableFor = Duration.zero
        const stopping = yield* Deferred.isDone(stop)
        // The claim in the settle statement answers the signals of every commit so far; kept, they
        // would send this relay into one more (empty) claim right after it.
        if (!stopping) {
          yield* mailbox.clear
        }
        if (!stopping) counters.claims++
        const next = yield* Effect.exit(settle(
          s,
          relayId,
          outcome.settlement,
          stopping
            ? Effect.as(store.settle(holder, outcome.settlement), [])
            : claimer.settleAndClaim(outcome.settlement, afterKey)
        ))
        if (Exit.isFailure(next)) {
          if (Cause.hasInterruptsOnly(next.cause)) return yield* Effect.failCause(next.cause)
          // The settle is lost with the claims: the lease expires and the events go out again.
          yield* log("relay settle failed; its events will be reclaimed after the lease", next.cause)
          held = []
          delay = nextDelay(s, delay, "error")
          yield* waitForWork
          continue
        }
        yield* recovered
        held = next.value
        if (lastClaim >= s.batchSize && Duration.toMillis(s.pollMin) > 0) yield* restore(Effect.sleep(s.pollMin))
        lastClaim = held.length
        if (held.length === 0) {
          delay = nextDelay(s, delay, 0)
          // Unordered: the combined claim saw every due event, so wait (for signals that arrived
          // after it started). Per-key: the keys just settled were still in flight in
          // that claim's snapshot, so look once more.
          if (s.ordering !== "per-key") yield* waitForWork
        }
      }
    })
  )
