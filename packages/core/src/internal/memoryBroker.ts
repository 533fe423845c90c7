// The in-memory broker's models and its construction; `MemoryBroker` re-exports the models and
// wraps the construction in its layer (kept here so the public module stays one readable file).
import { Clock, Deferred, Effect, Exit, PubSub, Ref, type Scope, Stream } from "effect"
import type * as Consumers from "../Consumer.ts"
import * as Errors from "../Errors.ts"
import { PublishError } from "../Errors.ts"
import type { Message } from "../Message.ts"
import * as Publisher from "../Publisher.ts"

/** `messaging.system` of the in-memory broker, on its publisher's and consumers' spans. */
export const memorySystem = "tidings-memory"

/** A delivered message with the broker's receive time (ms, from `Clock`). */
export interface Delivery {
  readonly message: Message
  readonly receivedAt: number
}

/** Decides, per message, whether the broker refuses it: for fault injection in tests. */
export type FaultInjector = (message: Message) => PublishError | undefined

/**
 * A message a consumer gave up on.
 * @since 0.1.0
 * @category models
 */
export interface DeadLetter {
  /** The consumer queue that dead-lettered it. */
  readonly queue: string
  readonly message: Message
  /** Deliveries made (1 when dead-lettered on the first failure). */
  readonly attempts: number
  /**
   * The outcome that dead-lettered it: `PermanentFailure` (not retryable), the last transient
   * outcome once the attempts ran out (`TransientFailure`, `Defect`, `Timeout`), or `DecodeFailure`,
   * `UnknownType`, `DeliveryLimit`.
   */
  readonly reason: DeadLetterReason
  /** The last error, as text. */
  readonly error: string
  /** When (ms, from `Clock`). */
  readonly at: number
}

/**
 * Why a message was dead-lettered (the `reason` attribute of `tidings_consumer_dead_lettered_total`).
 * @since 0.1.0
 * @category models
 */
export type DeadLetterReason = Exclude<Consumers.OutcomeLabel, "Success" | "Shutdown">

/** The in-memory broker. */
export interface Service {
  /** Everything confirmed so far, in order. */
  readonly delivered: Effect.Effect<ReadonlyArray<Delivery>>
  /** A live stream of confirmed messages. */
  readonly subscribe: Stream.Stream<Delivery>
  /** A subscription that receives every message confirmed from now on, for as long as the scope lives. */
  readonly subscription: Effect.Effect<PubSub.Subscription<Delivery>, never, Scope.Scope>
  /** Replaces the fault injector (`undefined` = accept everything). */
  readonly setFault: (fault: FaultInjector | undefined) => Effect.Effect<void>
  /**
   * Takes the broker away (`false`: every publish fails with a `PublishError` whose reason is
   * `Unavailable`, and the publisher's `awaitAvailable` waits) or brings it back (`true`).
   */
  readonly setAvailable: (available: boolean) => Effect.Effect<void>
  /** Messages dead-lettered by the consumers of this broker, oldest first. */
  readonly deadLetters: Effect.Effect<ReadonlyArray<DeadLetter>>
  /** Records a dead letter (consumers call it). */
  readonly deadLetter: (letter: DeadLetter) => Effect.Effect<void>
  readonly clear: Effect.Effect<void>
}

/** Options of the in-memory broker. */
export interface Options {
  /** Keep delivered messages for `delivered` (default true; benchmarks turn it off). */
  readonly record?: boolean
  readonly fault?: FaultInjector
}

/** Builds the broker and the `Publisher` backed by it. */
export const make = (
  options: Options
): Effect.Effect<{ readonly broker: Service; readonly publisher: Publisher.Service }> =>
  Effect.gen(function*() {
    const record = options.record ?? true
    const log = yield* Ref.make<Array<Delivery>>([])
    const dead = yield* Ref.make<Array<DeadLetter>>([])
    const hub = yield* PubSub.unbounded<Delivery>()
    let fault = options.fault
    // While unavailable, `back` completes when the broker returns.
    let back: Deferred.Deferred<void> | undefined
    const awaitAvailable = Effect.suspend(() => back === undefined ? Effect.void : Deferred.await(back))
    const publish = (messages: ReadonlyArray<Message>) =>
      Effect.gen(function*() {
        if (back !== undefined) {
          return yield* new PublishError({
            message: "the memory broker is unavailable",
            reason: new Errors.Unavailable()
          })
        }
        const now = yield* Clock.currentTimeMillis
        const results: Array<Publisher.PublishResult> = []
        const accepted: Array<Delivery> = []
        for (const message of messages) {
          let error: PublishError | undefined
          try {
            error = fault?.(message)
          } catch (cause) {
            error = new PublishError({
              message: "fault injector threw",
              reason: new Errors.Unknown({ retryable: true }),
              cause
            })
          }
          if (error !== undefined) {
            results.push(Publisher.rejected(message.id, error))
          } else {
            accepted.push({ message, receivedAt: now })
            results.push(Publisher.published(message.id))
          }
        }
        if (record) yield* Ref.update(log, (xs) => (xs.push(...accepted), xs))
        yield* PubSub.publishAll(hub, accepted)
        return results
      })
    const broker: Service = {
      delivered: Effect.map(Ref.get(log), (xs) => xs.slice()),
      subscribe: Stream.fromPubSub(hub),
      subscription: PubSub.subscribe(hub),
      setFault: (f) => Effect.sync(() => void (fault = f)),
      setAvailable: (available) =>
        Effect.sync(() => {
          if (available && back !== undefined) {
            Deferred.doneUnsafe(back, Exit.void)
            back = undefined
          } else if (!available && back === undefined) {
            back = Deferred.makeUnsafe<void>()
          }
        }),
      deadLetters: Effect.map(Ref.get(dead), (xs) => xs.slice()),
      deadLetter: (letter) => Ref.update(dead, (xs) => (xs.push(letter), xs)),
      clear: Effect.andThen(Ref.set(log, []), Ref.set(dead, []))
    }
    const publisher: Publisher.Service = {
      publish,
      awaitAvailable,
      destination: { system: memorySystem, name: "memory" }
    }
    return { broker, publisher }
  })
