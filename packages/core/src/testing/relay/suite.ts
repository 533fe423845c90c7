/**
 * What the parts of the relay contract share: the store under test (fresh per test, with its
 * eager-dispatch registry and a memory broker), the suite's time, relays started in scopes of their
 * own, and wrappers that spy on a store or take it (or a publisher) away.
 * @internal
 */
import type { it } from "@effect/vitest"
import { Clock, Deferred, Duration, Effect, Exit, Layer, type Scope } from "effect"
import { PublishError, StoreError, Unavailable } from "../../Errors.ts"
import type * as MemoryBroker from "../../MemoryBroker.ts"
import { type AppendClaim, type ClaimedEvent, OutboxStore, type Service, type Settlement } from "../../OutboxStore.ts"
import { Publisher, rejected } from "../../Publisher.ts"
import type * as Relay from "../../Relay.ts"
import { startRelay, type Time, withStore } from "../helpers.ts"

/**
 * The services a contract test body runs with.
 * @since 0.1.0
 * @category models
 */
export type Env = OutboxStore | MemoryBroker.MemoryBroker | Publisher | Scope.Scope

/**
 * A relay contract part's view of the suite.
 * @since 0.1.0
 * @category models
 */
export interface Suite {
  readonly test: typeof it.live
  readonly time: Time
  /** Runs `body` on a fresh store with a fresh memory broker. */
  readonly run: <A, E>(body: Effect.Effect<A, E, Env>, broker?: MemoryBroker.Options) => Effect.Effect<A, E>
  /** Starts a relay; `stop` shuts it down while the suite's time passes. */
  readonly start: (
    config: Relay.Config
  ) => Effect.Effect<
    { readonly relay: Relay.Service; readonly stop: Effect.Effect<void> },
    unknown,
    OutboxStore | Publisher
  >
}

/**
 * Builds the suite of one store.
 * @since 0.1.0
 * @category constructors
 */
export const makeSuite = (
  makeStore: Effect.Effect<Service, unknown, Scope.Scope>,
  test: typeof it.live,
  time: Time
): Suite => ({
  test,
  time,
  run: (body, broker) => withStore(makeStore, Effect.scoped(body), broker),
  start: (config) => Effect.map(startRelay(config), ({ relay, stop }) => ({ relay, stop: time.run(stop) }))
})

/**
 * Settings that keep the background loops out of the way, with short polls.
 * @since 0.1.0
 * @category fixtures
 */
export const quiet: Relay.Config = {
  statsInterval: false,
  retention: false,
  pollInterval: { base: "20 millis", max: "100 millis" }
}

/**
 * Waits until the relay's pollers are all idle (their last claim found nothing), having claimed at least once.
 * @since 0.1.0
 * @category fixtures
 */
export const idle = (time: Time, relay: Relay.Service, pollers = 1) =>
  time.eventually(
    Effect.map(relay.status, (s) => s.claims > 0 && s.idle >= pollers),
    "5 seconds",
    `${pollers} idle pollers`
  )

/**
 * Wraps a store, counting and recording what it is asked to do.
 * @since 0.1.0
 * @category fixtures
 */
export const spyStore = (inner: Service) => {
  let claimed = 0
  const attempts: Array<number> = []
  const settlements: Array<Settlement> = []
  const appendClaims: Array<AppendClaim | undefined> = []
  const count = <E>(effect: Effect.Effect<ReadonlyArray<ClaimedEvent>, E>) =>
    Effect.tap(effect, (got) =>
      Effect.sync(() => {
        claimed += got.length
        attempts.push(...got.map((c) => c.attempts))
      }))
  let atOnce = false
  const record = (settlement: Settlement) => Effect.sync(() => void settlements.push(settlement))
  const store: Service = {
    ...inner,
    afterCommit: (effect) => atOnce ? effect : inner.afterCommit(effect),
    defersAfterCommit: Effect.suspend(() => atOnce ? Effect.succeed(false) : inner.defersAfterCommit),
    append: (messages, claim) =>
      Effect.andThen(Effect.sync(() => void appendClaims.push(claim)), inner.append(messages, claim)),
    claim: (options) => count(inner.claim(options)),
    settle: (relayId, settlement) => Effect.andThen(record(settlement), inner.settle(relayId, settlement)),
    settleAndClaim: (relayId, settlement, next) =>
      Effect.andThen(record(settlement), count(inner.settleAndClaim(relayId, settlement, next))),
    claimSuspect: (options) =>
      Effect.tap(
        inner.claimSuspect(options),
        (got) => Effect.sync(() => void (got === undefined ? undefined : attempts.push(got.attempts)))
      )
  }
  return {
    store,
    /** Events that came back from claims (not suspects). */
    claimed: () => claimed,
    /** The attempt count of every claimed event, suspects included. */
    attempts: () => attempts,
    /** Every settlement written. */
    settlements: () => settlements,
    appendClaims: () => appendClaims,
    /** Makes `afterCommit` run hooks at once, as a transaction that does not defer them would. */
    runHooksAtOnce: (on: boolean) => void (atOnce = on)
  }
}

const unavailable = (operation: string) =>
  new StoreError({ operation, message: "connection refused (test)", reason: new Unavailable() })

/**
 * Wraps a store that can be taken away: `down` fails every call with an `Unavailable` store error,
 * `gone` holds every call until the store is `up` again (a database that does not answer).
 * @since 0.1.0
 * @category fixtures
 */
export const switchableStore = (inner: Service) => {
  let mode: "up" | "down" | "gone" = "up"
  let back = Deferred.makeUnsafe<void>()
  const guard = <A, E>(operation: string, effect: Effect.Effect<A, E>): Effect.Effect<A, E | StoreError> =>
    Effect.suspend((): Effect.Effect<A, E | StoreError> =>
      mode === "up"
        ? effect
        : mode === "down"
        ? Effect.fail(unavailable(operation))
        : Effect.andThen(Deferred.await(back), effect)
    )
  const store: Service = {
    ...inner,
    claim: (o) => guard("claim", inner.claim(o)),
    settle: (r, s) => guard("settle", inner.settle(r, s)),
    settleAndClaim: (r, s, n) => guard("settleAndClaim", inner.settleAndClaim(r, s, n)),
    release: (r, ids) => guard("release", inner.release(r, ids)),
    reclaimExpired: (o) => guard("reclaim", inner.reclaimExpired(o)),
    claimSuspect: (o) => guard("claimSuspect", inner.claimSuspect(o)),
    prune: (o) => guard("prune", inner.prune(o)),
    stats: guard("stats", inner.stats)
  }
  return {
    store,
    set: (next: "up" | "down" | "gone") =>
      Effect.sync(() => {
        if (next === "up") Deferred.doneUnsafe(back, Exit.void)
        else if (mode === "up") back = Deferred.makeUnsafe<void>()
        mode = next
      })
  }
}

/**
 * A publisher in front of the memory broker's that can be taken away without saying when it is
 * back (no `awaitAvailable`): while down, a publish fails as `Unavailable`, for the whole batch or
 * per message (in turns). It records when each publish was called (by `Clock`).
 * @since 0.1.0
 * @category fixtures
 */
export const switchablePublisher = () => {
  let down = false
  let turn = 0
  const calls: Array<number> = []
  const layer = Layer.effect(
    Publisher,
    Effect.gen(function*() {
      const inner = yield* Publisher
      return Publisher.of({
        publish: (messages) =>
          Effect.gen(function*() {
            calls.push(yield* Clock.currentTimeMillis)
            if (!down) return yield* inner.publish(messages)
            const error = new PublishError({ message: "broker connection lost (test)", reason: new Unavailable() })
            if (turn++ % 2 === 0) return yield* error
            return messages.map((m) => rejected(m.id, error))
          })
      })
    })
  )
  return { layer, calls: () => calls, setDown: (on: boolean) => Effect.sync(() => void (down = on)) }
}

/**
 * The milliseconds `effect` took, by the suite's clock.
 * @since 0.1.0
 * @category fixtures
 */
export const timed = <A, E, R>(time: Time, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const start = yield* time.now
    const value = yield* effect
    return { value, ms: (yield* time.now) - start }
  })

/**
 * A duration in milliseconds.
 * @since 0.1.0
 * @category fixtures
 */
export const ms = (d: Duration.Input) => Duration.toMillis(Duration.fromInputUnsafe(d))
