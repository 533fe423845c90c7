/**
 * An in-memory broker: a `Publisher` that confirms at once and keeps what it received, plus
 * subscribers. For unit tests, the embedded demo and latency benchmarks of the relay itself.
 * @module
 */
import { Clock, Context, Effect, Layer, PubSub, Ref, Stream } from "effect"
import { PublishError } from "./Errors.ts"
import type { Message } from "./Message.ts"
import * as Publisher from "./Publisher.ts"

/** A delivered message with the broker's receive time (ms, from `Clock`). */
export interface Delivery {
  readonly message: Message
  readonly receivedAt: number
}

/** Decides, per message, whether the broker refuses it: for fault injection in tests. */
export type FaultInjector = (message: Message) => PublishError | undefined

/** The in-memory broker. */
export interface Service {
  /** Everything confirmed so far, in order. */
  readonly delivered: Effect.Effect<ReadonlyArray<Delivery>>
  /** A live stream of confirmed messages. */
  readonly subscribe: Stream.Stream<Delivery>
  /** Replaces the fault injector (`undefined` = accept everything). */
  readonly setFault: (fault: FaultInjector | undefined) => Effect.Effect<void>
  readonly clear: Effect.Effect<void>
}

/** The in-memory broker service. */
export class MemoryBroker extends Context.Service<MemoryBroker, Service>()("@tidings/core/MemoryBroker") {}

/** Options of the in-memory broker. */
export interface Options {
  /** Keep delivered messages for `delivered` (default true; benchmarks turn it off). */
  readonly record?: boolean
  readonly fault?: FaultInjector
}

/** Provides both `MemoryBroker` and the `Publisher` port backed by it. */
export const layer = (options: Options = {}): Layer.Layer<MemoryBroker | Publisher.Publisher> =>
  Layer.effectContext(Effect.gen(function*() {
    const record = options.record ?? true
    const log = yield* Ref.make<Array<Delivery>>([])
    const hub = yield* PubSub.unbounded<Delivery>()
    let fault = options.fault
    const publish = (messages: ReadonlyArray<Message>) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const results: Array<Publisher.PublishResult> = []
        const accepted: Array<Delivery> = []
        for (const message of messages) {
          let error: PublishError | undefined
          try {
            error = fault?.(message)
          } catch (cause) {
            error = new PublishError({ reason: "fault injector threw", retryable: true, cause })
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
    const broker = MemoryBroker.of({
      delivered: Effect.map(Ref.get(log), (xs) => xs.slice()),
      subscribe: Stream.fromPubSub(hub),
      setFault: (f) => Effect.sync(() => void (fault = f)),
      clear: Ref.set(log, [])
    })
    return Context.make(MemoryBroker, broker).pipe(Context.add(Publisher.Publisher, Publisher.Publisher.of({ publish })))
  }))
