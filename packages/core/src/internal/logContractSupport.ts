import { Context, Duration, Effect, Exit, Layer, Metric, Schedule, Schema, Scope } from "effect"
import { TestClock } from "effect/testing"
import * as Event from "../Event.ts"
import * as LogRelay from "../LogRelay.ts"
import * as LogStore from "../LogStore.ts"
import * as MemoryBroker from "../MemoryBroker.ts"
import type { Message } from "../Message.ts"
import * as Metrics from "../Metrics.ts"
import * as Outbox from "../Outbox.ts"
import { OutboxStore } from "../OutboxStore.ts"
import type * as OutboxStorePort from "../OutboxStore.ts"
import type { Publisher } from "../Publisher.ts"

/** The two faces of a log store under test. */
export interface LogStores {
  readonly log: LogStore.Service
  readonly outbox: OutboxStorePort.Service
}

/** The services a contract test body gets. */
export type Env = LogStore.LogStore | OutboxStore | MemoryBroker.MemoryBroker | Publisher | Scope.Scope

/** The event the suites append: `n` counts per key. */
export const Tick = Event.define("log.tick", { aggregateType: "clock", schema: Schema.Struct({ n: Schema.Int }) })

/** How a suite waits: on `TestClock` (moving time) or on the store's own clock (real time). */
export const clockOps = (onTestClock: boolean) => {
  /** Lets `duration` pass on the store's clock. */
  const passTime = (duration: Duration.Input) => (onTestClock ? TestClock.adjust(duration) : Effect.sleep(duration))
  /** Waits until `check` holds: by moving the test clock in small steps, or polling in real time. */
  const waitFor = <E, R>(
    what: string,
    check: Effect.Effect<boolean, E, R>,
    limit: Duration.Input = "45 seconds"
  ): Effect.Effect<void, E, R> =>
    Effect.gen(function*() {
      const steps = Math.ceil(Duration.toMillis(Duration.fromInputUnsafe(limit)) / 10)
      for (let i = 0; i < steps; i++) {
        if (yield* check) return
        yield* passTime("10 millis")
      }
      return yield* Effect.die(new Error(`timed out waiting for ${what}`))
    })
  return { passTime, waitFor }
}

/** Settings that keep tests quick: short leases and polls, fast retries, no background loops. */
export const quick: LogRelay.Config = {
  lease: "2 seconds",
  pollInterval: { base: "20 millis", max: "100 millis" },
  statsInterval: false,
  retention: false,
  retry: Schedule.spaced("20 millis")
}

/** Runs `body` on fresh stores and a fresh memory broker. */
export const withLog = <A, E>(
  makeStores: Effect.Effect<LogStores, unknown, Scope.Scope>,
  body: Effect.Effect<A, E, Env>,
  broker: MemoryBroker.Options = {}
) =>
  Effect.scoped(Effect.gen(function*() {
    const stores = yield* Effect.orDie(makeStores)
    return yield* body.pipe(
      Effect.provide(Layer.mergeAll(
        Layer.succeed(LogStore.LogStore, stores.log),
        Layer.succeed(OutboxStore, stores.outbox),
        MemoryBroker.layer(broker)
      ))
    )
  }))

/** Starts a log relay in a scope of its own; `stop` closes it (gracefully). */
export const startRelay = (config: LogRelay.Config) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(LogRelay.layer({ ...quick, ...config }), scope).pipe(Effect.orDie)
    return { relay: Context.get(context, LogRelay.LogRelay), stop: Scope.close(scope, Exit.void) }
  })

/** Appends one event per call in its own transaction. */
export const appendOne = (key: string, n: number) =>
  Effect.flatMap(
    OutboxStore,
    (store) => store.withTransaction(Outbox.append(Tick, { aggregateId: key, payload: { n } }))
  )

/** The messages the broker received, in order. */
export const delivered = Effect.map(MemoryBroker.MemoryBroker.use((b) => b.delivered), (ds) => ds.map((d) => d.message))

/** `n` of a Tick message. */
export const nOf = (m: Message): number => (m.payload as { readonly n: number }).n

/** A counter's current count for a group. */
export const countOf = (metric: typeof Metrics.log.heldBack, group: string) =>
  Effect.map(Metric.value(Metric.withAttributes(metric, { group })), (s) => s.count)

/**
 * Every event in the log, per partition, in log order (read as a fresh group that holds every
 * partition), to compare with what was published.
 */
export const logOrder = Effect.gen(function*() {
  const store = yield* LogStore.LogStore
  const group = `check-${Math.random().toString(36).slice(2, 8)}`
  const member = `${group}-m`
  yield* store.join({ group, member, lease: Duration.minutes(1), startFrom: "earliest" })
  const states = yield* store.acquire(
    group,
    member,
    Array.from({ length: store.partitions }, (_, p) => p),
    Duration.minutes(1)
  )
  const out = new Map<number, Array<string>>()
  for (const st of states) {
    let after = st.cursor
    while (true) {
      const { events } = yield* store.read(group, member, [{
        partition: st.partition,
        epoch: st.epoch,
        after,
        limit: 1000
      }])
      if (events.length === 0) break
      out.set(st.partition, [...(out.get(st.partition) ?? []), ...events.map((e) => e.message.id)])
      after = events[events.length - 1]!.position
    }
  }
  yield* store.dropGroup(group)
  return out
})
