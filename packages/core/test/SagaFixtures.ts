/**
 * Saga definitions and helpers shared by the saga tests (memory here, Postgres in
 * `@tidings/postgres`): a local "create order" saga whose steps record what they did, and its
 * command-driven twin with participants.
 */
import { Cause, Clock, Duration, Effect, Exit, Fiber, Option, Schedule, Schema } from "effect"
import { TestClock } from "effect/testing"
import { StoreError, Unavailable } from "../src/Errors.ts"
import * as Event from "../src/Event.ts"
import type { Message } from "../src/Message.ts"
import { OutboxStore } from "../src/OutboxStore.ts"
import * as Saga from "../src/Saga.ts"

export const OrderInput = Schema.Struct({ orderId: Schema.String, sku: Schema.String, cents: Schema.Int })
export type OrderInput = typeof OrderInput.Type

/** A business failure of a participant. */
export class Declined extends Schema.TaggedError<Declined>()("Declined", { reason: Schema.String }) {
  get isRetryable(): boolean {
    return false
  }
}

/** What the steps of a local saga do, and when they fail. */
export interface Script {
  /** Step name → how many times its action fails before it succeeds (Infinity: always). */
  readonly failAction?: Readonly<Record<string, number>>
  /** Step name → its action sleeps this long (for timeouts). */
  readonly slowAction?: Readonly<Record<string, Duration.Input>>
  /** Step name → how many times its compensation fails before it succeeds. */
  readonly failCompensation?: Readonly<Record<string, number>>
  /** Step name → its compensation sleeps this long. */
  readonly slowCompensation?: Readonly<Record<string, Duration.Input>>
  /** Records every action and compensation run (`reserve`, `undo:reserve`, ...). */
  readonly log: Array<string>
  /** Appends to the log. */
  readonly record: (entry: string) => void
  /** Succeeds once `entry` is in the log: waits for that state, not for time. */
  readonly reached: (entry: string) => Effect.Effect<void>
}

export const makeScript = (overrides: Omit<Script, "log" | "record" | "reached"> = {}): Script => {
  const log: Array<string> = []
  const waiting = new Set<() => void>()
  return {
    ...overrides,
    log,
    record: (entry) => {
      log.push(entry)
      for (const wake of [...waiting]) wake()
    },
    reached: (entry) =>
      Effect.callback<void>((resume) => {
        const check = () => {
          if (!log.includes(entry)) return
          waiting.delete(check)
          resume(Effect.void)
        }
        waiting.add(check)
        check()
        return Effect.sync(() => void waiting.delete(check))
      })
  }
}

const attempt = (script: Script, key: string, failures: number | undefined, error: () => unknown) =>
  Effect.suspend(() => {
    script.record(key)
    const done = script.log.filter((k) => k === key).length
    return failures !== undefined && done <= failures ? Effect.fail(error()) : Effect.void
  })

const slow = (d: Duration.Input | undefined) => d === undefined ? Effect.void : Effect.sleep(d)

/**
 * A local create-order saga: reserve (a Date in its result, to show schema encoding), charge (uses
 * the reservation), confirm. Timeouts and retries are short so that tests run fast.
 */
export const localOrder = (
  script: Script,
  options: { readonly name?: string; readonly chargeTimeout?: Duration.Input } = {}
) =>
  Saga.make(options.name ?? "local-order", { input: OrderInput })
    .step("reserve", {
      result: Schema.Struct({ reservationId: Schema.String, until: Schema.DateFromString }),
      action: (ctx) =>
        attempt(script, "reserve", script.failAction?.["reserve"], () => new Declined({ reason: "out of stock" })).pipe(
          Effect.andThen(slow(script.slowAction?.["reserve"])),
          Effect.as({ reservationId: `res-${ctx.input.orderId}`, until: new Date("2030-01-01T00:00:00.000Z") })
        ),
      compensate: (_ctx, result) =>
        attempt(script, "undo:reserve", script.failCompensation?.["reserve"], () =>
          new StoreError({ operation: "release", message: "inventory down", reason: new Unavailable() })).pipe(
            Effect.andThen(slow(script.slowCompensation?.["reserve"])),
            Effect.andThen(Effect.sync(() =>
              script.record(`released ${result.reservationId} until ${result.until.toISOString()}`)
            ))
          ),
      compensation: { timeout: "2 seconds", retry: Schedule.spaced("10 millis").pipe(Schedule.upTo({ times: 2 })) }
    })
    .step("charge", {
      result: Schema.Struct({ paymentId: Schema.String }),
      action: (ctx) =>
        attempt(script, "charge", script.failAction?.["charge"], () =>
          new StoreError({ operation: "charge", message: "gateway busy", reason: new Unavailable() })).pipe(
            Effect.andThen(slow(script.slowAction?.["charge"])),
            // typed access to an earlier step's result (decoded: `until` is a Date again)
            Effect.as({
              paymentId: `pay-${ctx.results.reserve.reservationId}-${ctx.results.reserve.until.getUTCFullYear()}`
            })
          ),
      compensate: (_ctx, result) =>
        attempt(script, "undo:charge", script.failCompensation?.["charge"], () =>
          new StoreError({ operation: "refund", message: "gateway down", reason: new Unavailable() })).pipe(
            Effect.andThen(slow(script.slowCompensation?.["charge"])),
            Effect.andThen(Effect.sync(() =>
              script.record(`refunded ${result.paymentId}`)
            ))
          ),
      retry: Schedule.spaced("10 millis").pipe(Schedule.upTo({ times: 2 })),
      ...(options.chargeTimeout === undefined ? {} : { timeout: options.chargeTimeout }),
      compensation: { timeout: "300 millis", retry: Schedule.spaced("10 millis").pipe(Schedule.upTo({ times: 2 })) }
    })
    .step("confirm", {
      action: (ctx) =>
        attempt(script, "confirm", script.failAction?.["confirm"], () =>
          new Declined({ reason: `order ${ctx.input.orderId} rejected` })).pipe(
            Effect.andThen(slow(script.slowAction?.["confirm"]))
          )
    })

// ---- command-driven twin ---------------------------------------------------------------------

export const Reserve = Event.define("inventory.reserve", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, sku: Schema.String })
})
export const Release = Event.define("inventory.release", {
  aggregateType: "order",
  schema: Schema.Struct({ reservationId: Schema.String })
})
export const Charge = Event.define("payment.charge", {
  aggregateType: "order",
  schema: Schema.Struct({ reservationId: Schema.String, cents: Schema.Int })
})
export const Refund = Event.define("payment.refund", {
  aggregateType: "order",
  schema: Schema.Struct({ paymentId: Schema.String })
})
export const Confirm = Event.define("order.confirm", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, paymentId: Schema.String })
})

export const commandOrder = (
  options: {
    readonly name?: string
    readonly chargeTimeout?: Duration.Input
    readonly refundRetry?: Schedule.Schedule<unknown, unknown>
  } = {}
) =>
  Saga.make(options.name ?? "command-order", { input: OrderInput })
    .command("reserve", {
      result: Schema.Struct({ reservationId: Schema.String }),
      send: (ctx) =>
        Reserve.make({ aggregateId: ctx.input.orderId, payload: { orderId: ctx.input.orderId, sku: ctx.input.sku } }),
      compensate: (ctx, r) =>
        Release.make({ aggregateId: ctx.input.orderId, payload: { reservationId: r.reservationId } })
    })
    .command("charge", {
      result: Schema.Struct({ paymentId: Schema.String }),
      send: (ctx) =>
        Charge.make({
          aggregateId: ctx.input.orderId,
          payload: { reservationId: ctx.results.reserve.reservationId, cents: ctx.input.cents }
        }),
      compensate: (ctx, r) => Refund.make({ aggregateId: ctx.input.orderId, payload: { paymentId: r.paymentId } }),
      ...(options.chargeTimeout === undefined ? {} : { timeout: options.chargeTimeout }),
      compensation: {
        retry: options.refundRetry ?? Schedule.spaced("10 millis").pipe(Schedule.upTo({ times: 2 })),
        timeout: "300 millis"
      }
    })
    .command("confirm", {
      send: (ctx) =>
        Confirm.make({
          aggregateId: ctx.input.orderId,
          payload: { orderId: ctx.input.orderId, paymentId: ctx.results.charge.paymentId }
        })
    })

/** How participants answer a command (undefined: no answer, as a participant that is down). */
export type Participant = (command: Saga.Command) => Saga.Outcome | undefined

/** Participants that do everything asked; `declineCharge` makes the payment fail. */
export const participants = (
  options: {
    readonly declineCharge?: boolean
    readonly failRefunds?: number
    readonly silent?: ReadonlyArray<string>
  } = {}
): Participant => {
  let refundsFailed = 0
  return (command) => {
    if (options.silent?.includes(command.message.type)) return undefined
    const payload = command.message.payload as Record<string, string>
    switch (command.message.type) {
      case Reserve.type:
        return Saga.completed({ reservationId: `res-${payload["orderId"]}` })
      case Charge.type:
        return options.declineCharge === true
          ? Saga.failed("card declined")
          : Saga.completed({ paymentId: `pay-${payload["reservationId"]}` })
      case Refund.type:
        if (refundsFailed < (options.failRefunds ?? 0)) {
          refundsFailed++
          return Saga.failed("refund gateway down")
        }
        return Saga.completed()
      default:
        return Saga.completed()
    }
  }
}

/**
 * Delivers what the outbox holds, as a relay and consumers would, until it is empty (bounded):
 * commands to `participant` (its reply is appended in a transaction), replies to `handleReply`.
 */
export const pump = <R>(registry: Saga.Registry<R>, participant: Participant, maxRounds = 50) =>
  Effect.gen(function*() {
    const outbox = yield* OutboxStore
    const seen: Array<Message> = []
    const outcomes: Array<Saga.ReplyOutcome> = []
    for (let round = 0; round < maxRounds; round++) {
      const claimed = yield* outbox.claim({ relayId: "pump", batchSize: 100, lease: Duration.seconds(30) })
      if (claimed.length === 0) return { seen, outcomes }
      yield* outbox.settle("pump", { published: claimed.map((c) => c.message.id), retry: [], failed: [] })
      for (const { message } of claimed) {
        seen.push(message)
        if (message.type === Saga.ReplyEvent.type) {
          outcomes.push(yield* Saga.handleReply(registry, message))
          continue
        }
        const command = Saga.commandOf(message)
        if (Option.isNone(command)) continue
        const outcome = participant(command.value)
        if (outcome !== undefined) yield* outbox.withTransaction(Saga.reply(command.value, outcome))
      }
    }
    return yield* Effect.die(new Error(`pump: still busy after ${maxRounds} rounds`))
  })

// ---- time and failures -----------------------------------------------------------------------

/** The tag of an exit's first typed error. */
export const failureTag = (exit: Exit.Exit<unknown, unknown>): string | undefined =>
  Exit.isFailure(exit)
    ? Option.getOrUndefined(Option.map(Cause.findErrorOption(exit.cause), (e) => (e as { _tag?: string })._tag))
    : undefined

/**
 * Runs `effect` on the TestClock (inside `it.effect`): forks it and moves the clock far ahead, so
 * that every sleep, timeout and retry delay on its way fires in order, at once. Returns its exit
 * and how much clock time it took.
 */
export const onTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.forkChild(Effect.gen(function*() {
      const began = yield* Clock.currentTimeMillis
      const exit = yield* Effect.exit(effect)
      return { exit, took: (yield* Clock.currentTimeMillis) - began }
    }))
    yield* TestClock.adjust("1 hour")
    return yield* Fiber.join(fiber)
  })

/**
 * Moves the TestClock forward `step` at a time until `check` holds: the clock-driven form of
 * waiting for a state (no real time passes; `max` is clock time, so a slow machine cannot hit it).
 */
export const clockUntil = <E, R>(
  check: Effect.Effect<boolean, E, R>,
  what: string,
  step: Duration.Input = "10 millis",
  max: Duration.Input = "10 minutes"
) =>
  Effect.gen(function*() {
    const steps = Math.ceil(
      Duration.toMillis(Duration.fromInputUnsafe(max)) / Duration.toMillis(Duration.fromInputUnsafe(step))
    )
    for (let i = 0; i <= steps; i++) {
      if (yield* check) return
      yield* TestClock.adjust(step)
    }
    return yield* Effect.die(
      new Error(`${what}: not reached within ${Duration.format(Duration.fromInputUnsafe(max))} of clock time`)
    )
  })
