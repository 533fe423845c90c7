/**
 * Test helpers for stores, publishers and relays: waiting for a state instead of a fixed time
 * ({@link eventually}, and {@link Time} for suites that run on `TestClock` or in real time), a
 * sample event type and a seeding helper, delivered-once checks, and a relay started in a scope of
 * its own. They depend on `effect` and core only (no test framework), so any test runner can use them.
 * @since 0.1.0
 * @module
 */
import { Cause, Clock, Context, Duration, Effect, Exit, Fiber, Layer, Option, Schedule, Schema, Scope } from "effect"
import { TestClock } from "effect/testing"
import * as EagerDispatch from "../EagerDispatch.ts"
import type { InvalidConfig } from "../Errors.ts"
import * as Event from "../Event.ts"
import * as MemoryBroker from "../MemoryBroker.ts"
import * as Outbox from "../Outbox.ts"
import { OutboxStore, type Service as Store } from "../OutboxStore.ts"
import { Publisher } from "../Publisher.ts"
import * as Relay from "../Relay.ts"

/**
 * Polls `check` every 20 ms (real time) until it returns true; dies after `timeout`.
 * @since 0.1.0
 * @category waiting
 */
export const eventually = <E, R>(
  check: Effect.Effect<boolean, E, R>,
  timeout: Duration.Input = "10 seconds",
  what = "condition"
): Effect.Effect<void, E, R> =>
  check.pipe(
    Effect.flatMap((ok) => ok ? Effect.void : Effect.fail(notYet)),
    Effect.retry({ schedule: Schedule.spaced("20 millis"), while: (e) => e === notYet }),
    Effect.timeoutOrElse({ duration: timeout, orElse: () => Effect.die(new Error(`timed out waiting for ${what}`)) })
  ) as Effect.Effect<void, E, R>

const notYet = Symbol("not yet")

/**
 * How a suite lets time pass. `test`: on `TestClock` (for stores whose time comes from `Clock`, as
 * the memory store's does): waits advance the clock, so a suite that covers leases, backoffs and
 * timeouts runs in milliseconds. `live`: real time (a database's `now()`).
 * @since 0.1.0
 * @category models
 */
export interface Time {
  readonly mode: "test" | "live"
  /** The current time, in milliseconds of this clock. */
  readonly now: Effect.Effect<number>
  /** Lets `duration` pass. */
  readonly advance: (duration: Duration.Input) => Effect.Effect<void>
  /** Waits until `check` returns true, for at most `timeout` of this clock's time. */
  readonly eventually: <E, R>(
    check: Effect.Effect<boolean, E, R>,
    timeout?: Duration.Input,
    what?: string
  ) => Effect.Effect<void, E, R>
  /** Runs `effect` to its end while time passes (a shutdown that waits for its deadline). */
  readonly run: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

const step = Duration.millis(10)

/**
 * Time on `TestClock`: every wait advances the clock in 10 ms steps, running what was due.
 * @since 0.1.0
 * @category time
 */
export const testTime: Time = {
  mode: "test",
  now: Clock.currentTimeMillis,
  advance: (duration) => TestClock.adjust(duration),
  eventually: (check, timeout = "10 seconds", what = "condition") =>
    Effect.gen(function*() {
      const until = (yield* Clock.currentTimeMillis) + Duration.toMillis(Duration.fromInputUnsafe(timeout))
      while (!(yield* check)) {
        if ((yield* Clock.currentTimeMillis) >= until) {
          return yield* Effect.die(new Error(`timed out waiting for ${what} (test clock)`))
        }
        yield* TestClock.adjust(step)
      }
    }),
  run: (effect) =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(effect, { startImmediately: true })
      while (fiber.pollUnsafe() === undefined) yield* TestClock.adjust(step)
      return yield* Fiber.join(fiber)
    })
}

/**
 * Real time.
 * @since 0.1.0
 * @category time
 */
export const liveTime: Time = {
  mode: "live",
  now: Effect.sync(() => Date.now()),
  advance: (duration) => Effect.sleep(duration),
  eventually,
  run: (effect) => effect
}

type ThingSchema = Schema.Struct<{ readonly n: Schema.Int; readonly label: Schema.String }>

/**
 * The event type the suites append.
 * @since 0.1.0
 * @category fixtures
 */
export const Thing: Event.EventType<"thing.happened", ThingSchema> = Event.define("thing.happened", {
  aggregateType: "thing",
  schema: Schema.Struct({ n: Schema.Int, label: Schema.String })
})

/**
 * A draft of {@link Thing} number `n` (aggregate `a<n mod 3>` unless given).
 * @since 0.1.0
 * @category fixtures
 */
export const draft = (n: number, aggregateId = `a${n % 3}`): Event.EventDraft<typeof Thing> =>
  Thing.make({ aggregateId, payload: { n, label: `#${n}` } })

/**
 * Appends `count` events in one committed transaction; returns their ids in order.
 * @since 0.1.0
 * @category fixtures
 */
export const seed = (count: number, from = 0): Effect.Effect<ReadonlyArray<string>, Outbox.AppendError, OutboxStore> =>
  Effect.gen(function*() {
    const store = yield* OutboxStore
    const messages = yield* store.withTransaction(
      Outbox.appendAll(Array.from({ length: count }, (_, i) => draft(from + i)))
    )
    return messages.map((m) => m.id)
  })

/**
 * The `_tag` of an exit's first typed failure, if any.
 * @since 0.1.0
 * @category assertions
 */
export const failureTag = (exit: Exit.Exit<unknown, unknown>): string | undefined =>
  Exit.isFailure(exit)
    ? Option.getOrUndefined(Option.map(Cause.findErrorOption(exit.cause), (e) => (e as { _tag?: string })._tag))
    : undefined

/**
 * The ids the memory broker received, in order.
 * @since 0.1.0
 * @category assertions
 */
export const deliveredIds: Effect.Effect<ReadonlyArray<string>, never, MemoryBroker.MemoryBroker> = Effect.map(
  MemoryBroker.MemoryBroker.use((b) => b.delivered),
  (ds) => ds.map((d) => d.message.id)
)

/**
 * Checks that `delivered` holds exactly `ids`, each once (in any order); dies naming the
 * difference otherwise.
 * @since 0.1.0
 * @category assertions
 */
export const checkDeliveredOnce = (delivered: ReadonlyArray<string>, ids: ReadonlyArray<string>): Effect.Effect<void> =>
  Effect.suspend(() => {
    const counts = new Map<string, number>()
    for (const id of delivered) counts.set(id, (counts.get(id) ?? 0) + 1)
    const twice = [...counts].filter(([, n]) => n > 1).map(([id]) => id)
    const wanted = new Set(ids)
    const missing = ids.filter((id) => !counts.has(id))
    const extra = [...counts.keys()].filter((id) => !wanted.has(id))
    if (twice.length + missing.length + extra.length === 0) return Effect.void
    return Effect.die(
      new Error(
        `delivered-once check: ${missing.length} missing, ${twice.length} more than once, ${extra.length} unexpected (${
          [...missing, ...twice, ...extra].slice(0, 5).join(", ")
        })`
      )
    )
  })

/**
 * Checks that the memory broker received exactly `ids`, each once.
 * @since 0.1.0
 * @category assertions
 */
export const assertDeliveredOnce = (
  ids: ReadonlyArray<string>
): Effect.Effect<void, never, MemoryBroker.MemoryBroker> =>
  Effect.flatMap(deliveredIds, (delivered) => checkDeliveredOnce(delivered, ids))

/**
 * Starts a relay in a scope of its own; `stop` closes it (a graceful shutdown), `relay` is its service.
 * @since 0.1.0
 * @category relays
 */
export const startRelay = (config: Relay.Config): Effect.Effect<
  { readonly relay: Relay.Service; readonly stop: Effect.Effect<void> },
  InvalidConfig,
  OutboxStore | Publisher
> =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(Relay.layer(config), scope)
    return { relay: Context.get(context, Relay.Relay), stop: Scope.close(scope, Exit.void) }
  })

/**
 * A publisher that waits `delay` per batch, then hands over to the publisher below it.
 * @since 0.1.0
 * @category relays
 */
export const slowPublisher = (delay: Duration.Input): Layer.Layer<Publisher, never, Publisher> =>
  Layer.effect(
    Publisher,
    Effect.gen(function*() {
      const inner = yield* Publisher
      return Publisher.of({
        publish: (messages) => Effect.andThen(Effect.sleep(delay), inner.publish(messages)),
        ...(inner.awaitAvailable === undefined ? {} : { awaitAvailable: inner.awaitAvailable })
      })
    })
  )

/**
 * Runs `body` with a store (built fresh by `makeStore` in the body's scope), its eager-dispatch
 * registry and a fresh memory broker as the publisher.
 * @since 0.1.0
 * @category stores
 */
export const withStore = <A, E, R>(
  makeStore: Effect.Effect<Store, unknown, Scope.Scope>,
  body: Effect.Effect<A, E, R>,
  broker: MemoryBroker.Options = {}
): Effect.Effect<A, E, Exclude<R, OutboxStore | MemoryBroker.MemoryBroker | Publisher | Scope.Scope>> =>
  Effect.scoped(Effect.gen(function*() {
    const store = yield* Effect.orDie(makeStore)
    return yield* body.pipe(
      Effect.provide(
        Layer.mergeAll(Layer.succeed(OutboxStore, store), Layer.fresh(EagerDispatch.layer), MemoryBroker.layer(broker))
      )
    )
  })) as never
