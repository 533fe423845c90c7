/**
 * Group claims for the unordered pollers of one relay group: a poller's settle-and-claim that
 * arrives while `statements` statements are already running waits in a queue, and the next
 * statement takes every waiting request at once: one statement settles all their batches and
 * claims a batch for each. With small batches the database's cost is mostly per statement (and per
 * commit), so merging the pollers' round trips gives small batches most of a large batch's
 * throughput, while each poller still publishes `batchSize` events at a time.
 * @module
 */
import { Deferred, type Duration, Effect, Exit, type Fiber, Queue } from "effect"
import type { StoreError } from "../Errors.ts"
import type { ClaimedEvent, OutboxStore, Settlement } from "../OutboxStore.ts"

interface Request {
  readonly settlement: Settlement | undefined
  readonly result: Deferred.Deferred<ReadonlyArray<ClaimedEvent>, StoreError>
}

/** How a poller claims: on its own, or through its group's shared claimer (this module). */
export interface Claimer {
  /** The `claimed_by` of every claim it makes: settles and releases of its events use it. */
  readonly holder: string
  /** Claims up to one batch (per-key: from after `afterKey`). */
  readonly claim: (afterKey: string | undefined) => Effect.Effect<ReadonlyArray<ClaimedEvent>, StoreError>
  /** Settles `settlement` and claims up to one batch, in one statement. */
  readonly settleAndClaim: (
    settlement: Settlement,
    afterKey: string | undefined
  ) => Effect.Effect<ReadonlyArray<ClaimedEvent>, StoreError>
}

const isEmpty = (s: Settlement) =>
  s.published.length === 0 && s.retry.length === 0 && s.failed.length === 0 && (s.released?.length ?? 0) === 0

/** One settlement holding all of `settlements` (one statement settles them together). */
export const mergeSettlements = (settlements: ReadonlyArray<Settlement>): Settlement => ({
  published: settlements.flatMap((s) => s.published),
  retry: settlements.flatMap((s) => s.retry),
  failed: settlements.flatMap((s) => s.failed),
  released: settlements.flatMap((s) => s.released ?? [])
})

/** Merged claims take at most this many rows (or one batch, if larger): beyond it, claims get slower. */
export const maxRows = 500

/**
 * Starts `statements` claiming fibers with `fork` (the relay group's, which stops them at
 * shutdown). A statement merges the requests of at most `pollers / statements` pollers (so that
 * all statements get work) and at most `maxRows` rows.
 */
export const make = (options: {
  readonly store: OutboxStore["Service"]
  readonly holder: string
  readonly batchSize: number
  readonly lease: Duration.Duration
  readonly statements: number
  readonly pollers: number
  readonly fork: <A, E>(effect: Effect.Effect<A, E>) => Effect.Effect<Fiber.Fiber<A, E>>
}): Effect.Effect<Claimer> =>
  Effect.gen(function*() {
    const { batchSize, holder, store } = options
    const requests = yield* Queue.unbounded<Request>()
    const maxMerge = Math.max(
      1,
      Math.min(Math.floor(maxRows / batchSize), Math.ceil(options.pollers / options.statements))
    )

    const run = (taken: ReadonlyArray<Request>) =>
      Effect.gen(function*() {
        const settlement = mergeSettlements(taken.flatMap((r) => r.settlement === undefined ? [] : [r.settlement]))
        const next = {
          relayId: holder,
          batchSize: batchSize * taken.length,
          lease: options.lease,
          ordering: "unordered" as const
        }
        // A bare claim runs untraced: the pollers record a span for the claims that found events.
        const exit = yield* Effect.exit(
          isEmpty(settlement)
            ? Effect.withTracerEnabled(store.claim(next), false)
            : store.settleAndClaim(holder, settlement, next)
        )
        if (Exit.isFailure(exit)) {
          for (const r of taken) Deferred.doneUnsafe(r.result, exit)
          return
        }
        // In claim order: the first requests get full batches, the last ones what is left.
        const rows = exit.value
        taken.forEach((r, i) =>
          Deferred.doneUnsafe(r.result, Exit.succeed(rows.slice(i * batchSize, (i + 1) * batchSize)))
        )
      })

    // Waiting for requests can be interrupted (shutdown); a statement and the hand-over of
    // its rows cannot, so that no claim is made without reaching its poller.
    const worker = Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        while (true) {
          const taken = yield* restore(Queue.takeBetween(requests, 1, maxMerge))
          yield* run(taken)
        }
      })
    )
    for (let i = 0; i < options.statements; i++) yield* options.fork(worker)

    const submit = (settlement: Settlement | undefined) =>
      Effect.suspend(() => {
        const result = Deferred.makeUnsafe<ReadonlyArray<ClaimedEvent>, StoreError>()
        Queue.offerUnsafe(requests, { settlement, result })
        return Deferred.await(result)
      })
    // Unordered only: no key position to keep.
    return { holder, claim: () => submit(undefined), settleAndClaim: (settlement) => submit(settlement) }
  })
