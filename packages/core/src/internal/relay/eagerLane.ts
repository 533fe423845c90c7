/**
 * The eager-dispatch lane of a relay group: events appended in this process on its store arrive
 * here after their commit, already claimed as `relayId`. `concurrency` workers publish them in
 * batches of up to `batchSize`; one settler writes the outcomes, all that accumulated while the
 * previous settle ran in one statement, off the publishing path. While the publisher is
 * unavailable the lane takes no hand-overs and gives back what it holds (not counted). Closing stops
 * new hand-overs, publishes what was handed over, then writes the last settlements.
 * @internal
 */
import { Cause, Deferred, Duration, Effect, Exit, Fiber, Queue, Schedule } from "effect"
import type * as EagerDispatch from "../../EagerDispatch.ts"
import * as Errors from "../../Errors.ts"
import type { ClaimedEvent, OutboxStore, Settlement } from "../../OutboxStore.ts"
import type { Publisher } from "../../Publisher.ts"
import { Wakeups } from "../../Wakeup.ts"
import { mergeSettlements } from "../claimCoalescer.ts"
import { awaitPublisher, nextPause, pause } from "./availability.ts"
import { publishHeld, settle } from "./publish.ts"
import type { Settings } from "./settings.ts"
import type { Workers } from "./workers.ts"

/** A running lane. */
export interface EagerLane {
  /** Stops hand-overs; the workers finish what they hold. */
  readonly close: Effect.Effect<void>
  /** The publishing workers. */
  readonly workers: ReadonlyArray<Fiber.Fiber<unknown, unknown>>
  /** After the workers: writes the last settlements. */
  readonly finish: Effect.Effect<void>
}

const giveBackRetry = Schedule.exponential("50 millis").pipe(Schedule.upTo({ times: 5 }))

const releaseAll = (events: ReadonlyArray<ClaimedEvent>): Settlement => ({
  published: [],
  retry: [],
  failed: [],
  released: events.map((e) => e.message.id)
})

/** Starts the lane and registers it in `registry`; `close` (or the scope's end) unregisters it. */
export const make = (options: {
  readonly settings: Settings
  readonly relayId: string
  readonly store: OutboxStore["Service"]
  readonly publisher: Publisher["Service"]
  readonly registry: EagerDispatch.Registry
  readonly stop: Deferred.Deferred<void>
  readonly workers: Workers
}) =>
  Effect.gen(function*() {
    const { publisher, registry, relayId, settings: s, stop, store } = options
    const wakeups = yield* Wakeups
    const events = yield* Queue.unbounded<ClaimedEvent, Cause.Done>()
    const settlements = yield* Queue.unbounded<Settlement, Cause.Done>()
    const limit = s.eagerLimit
    const backpressure = s.backpressure
    let open = true
    let paused = false
    let unavailableFor = Duration.zero
    let inFlight = 0
    // Producers waiting for room (backpressure) wait on `room`, replaced each time it opens.
    let room = Deferred.makeUnsafe<void>()
    const released = (n: number) => {
      inFlight -= n
      if (inFlight < limit) {
        Deferred.doneUnsafe(room, Exit.void)
        room = Deferred.makeUnsafe<void>()
      }
    }
    const waitForRoom: Effect.Effect<void> = Effect.suspend(() =>
      open && inFlight >= limit ? Effect.andThen(Deferred.await(room), waitForRoom) : Effect.void
    )
    // Events written claimed for the lane that it will not publish: back to pending (the attempt not
    // counted), and the pollers woken to claim them. The producer's after-commit hook waits for it,
    // so it retries only briefly: rows it cannot give back are reclaimed after the lease.
    const giveBack = (back: ReadonlyArray<ClaimedEvent>) =>
      store.release(relayId, back.map((e) => e.message.id)).pipe(
        Effect.retry({ schedule: giveBackRetry, while: Errors.isRetryable }),
        Effect.andThen(wakeups.signal("local")),
        Effect.ignore({ log: true })
      )
    const lane: EagerDispatch.Lane = {
      store,
      claim: { relayId, lease: s.lease },
      hasRoom: (n) => open && !paused && (backpressure !== false || inFlight + n <= limit),
      deliver: (delivered) =>
        Effect.suspend(() => {
          if (!open || paused) return giveBack(delivered)
          // The room was checked per append, before the commit: a transaction with many appends can
          // bring more. What does not fit goes back to pending (a claim takes it), so the queue stays
          // bounded and nothing waits in memory long enough for its lease to run out. With
          // backpressure the producers wait from `limit` on, and the queue may hold twice as much,
          // so that the events of the transactions committing meanwhile are not turned back.
          const fits = Math.max(0, Math.min(delivered.length, (backpressure === false ? limit : 2 * limit) - inFlight))
          inFlight += fits
          Queue.offerAllUnsafe(events, fits === delivered.length ? delivered : delivered.slice(0, fits))
          const rest = fits === delivered.length ? Effect.void : giveBack(delivered.slice(fits))
          return backpressure === false ? rest : Effect.andThen(rest, Effect.timeoutOption(waitForRoom, backpressure))
        })
    }
    // Until the publisher is back (or, when it cannot say, for a capped pause) the lane takes no
    // hand-overs: producers write pending, and the pollers claim once it is available.
    const pauseLane = Effect.suspend(() => {
      if (paused) return Effect.void
      paused = true
      unavailableFor = nextPause(unavailableFor)
      const wait = publisher.awaitAvailable === undefined
        ? pause(unavailableFor, stop)
        : Effect.asVoid(awaitPublisher(publisher, stop))
      return Effect.asVoid(options.workers.fork(Effect.ensuring(wait, Effect.sync(() => void (paused = false)))))
    })
    const worker = Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        while (true) {
          const batch = yield* restore(Queue.takeBetween(events, 1, s.batchSize))
          if (paused) {
            released(batch.length)
            Queue.offerUnsafe(settlements, releaseAll(batch))
            continue
          }
          const outcome = yield* publishHeld(restore, store, publisher, batch, s, relayId)
          released(batch.length)
          Queue.offerUnsafe(settlements, outcome.settlement)
          if (outcome.unavailable) yield* pauseLane
          else unavailableFor = Duration.zero
        }
      })
    ).pipe(Effect.catchIf(Cause.isDone, () => Effect.void))
    const settler = Effect.gen(function*() {
      while (true) {
        const merged = mergeSettlements(yield* Queue.takeAll(settlements))
        yield* settle(s, relayId, merged, store.settle(relayId, merged)).pipe(
          Effect.andThen((merged.released?.length ?? 0) > 0 ? wakeups.signal("local") : Effect.void),
          Effect.catchCause((cause) =>
            Effect.logWarning("relay settle failed; its events will be reclaimed after the lease", cause).pipe(
              Effect.annotateLogs({ relayId })
            )
          )
        )
      }
    }).pipe(Effect.catchIf(Cause.isDone, () => Effect.void))
    const workers = yield* Effect.forEach(Array.from({ length: s.concurrency }), () => options.workers.fork(worker))
    const settling = yield* options.workers.fork(settler)
    // No more hand-overs; producers waiting for room go on.
    let unregister = () => {}
    const shut = Effect.sync(() => {
      open = false
      Deferred.doneUnsafe(room, Exit.void)
      unregister()
    })
    // Also shut if the layer fails to start, so that no producer hands events to dead workers.
    yield* Effect.acquireRelease(Effect.sync(() => void (unregister = registry.register(lane))), () => shut)
    return {
      close: Effect.andThen(shut, Queue.end(events)),
      workers,
      finish: Effect.andThen(Queue.end(settlements), Effect.asVoid(Fiber.await(settling)))
    } satisfies EagerLane
  })
