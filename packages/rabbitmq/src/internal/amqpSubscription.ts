// A consumer's subscription: on every (re)connect its channel is opened with the prefetch, the
// consumer queue's topology declared and `basic.consume` issued; deliveries go to the workers'
// queue. At shutdown the subscription is cancelled (bounded), so nothing new arrives.
import type { Channel } from "amqplib"
import { type Cause, Duration, Effect, Queue, type Scope } from "effect"
import type { Service as Connection } from "../AmqpConnection.ts"
import type { AmqpConnectionError, TopologyError } from "../AmqpErrors.ts"
import type * as Topology from "../Topology.ts"
import { connectionError } from "./amqpError.ts"
import type { Item } from "./amqpSettle.ts"

export interface Subscription {
  /** The channel of the current subscription: deliveries of any other channel were requeued by the broker. */
  readonly channel: () => Channel | undefined
  /** Subscribed right now. */
  readonly consuming: () => boolean
  /** Stops new deliveries: cancels the subscription, waiting at most `timeout` for the broker. */
  readonly cancel: (timeout: Duration.Duration) => Effect.Effect<void>
}

let tagCounter = 0
// Consumer tags must be unique per channel; this makes them unique per process too, for the broker's views.
const tagPrefix = Math.random().toString(36).slice(2, 8)

export const subscribe = (connection: Connection, options: {
  readonly name: string
  readonly queue: string
  readonly topology: Topology.Topology | undefined
  readonly prefetch: number
  readonly inbox: Queue.Queue<Item, Cause.Done>
  /** A delivery that arrived after shutdown began was requeued. */
  readonly onRequeued: () => void
}): Effect.Effect<Subscription, AmqpConnectionError | TopologyError, Scope.Scope> =>
  Effect.gen(function*() {
    let stopping = false
    let openChannel: Channel | undefined
    let consuming: { readonly channel: Channel; readonly tag: string } | undefined

    yield* connection.register({
      name: `consumer:${options.name}`,
      open: (channels) =>
        Effect.gen(function*() {
          if (options.topology !== undefined) yield* channels.declare(options.topology)
          const channel = yield* channels.channel
          channel.on("close", () => {
            if (openChannel === channel) openChannel = undefined
            if (consuming?.channel === channel) consuming = undefined
          })
          yield* Effect.tryPromise({
            try: () => channel.prefetch(options.prefetch),
            catch: (error) => connectionError("prefetch", error)
          })
          openChannel = channel
          if (stopping) return
          const tag = `${options.name}.${tagPrefix}.${(tagCounter++).toString(36)}`
          const reply = yield* Effect.tryPromise({
            try: () =>
              channel.consume(options.queue, (message) => {
                if (message === null) {
                  // The broker cancelled us (queue deleted or failed over): a new channel re-declares and resubscribes.
                  channel.close().catch(() => undefined)
                  return
                }
                if (stopping || !Queue.offerUnsafe(options.inbox, { message, channel })) {
                  try {
                    channel.nack(message, false, true)
                    options.onRequeued()
                  } catch {
                    // channel gone: the broker requeues it anyway
                  }
                }
              }, { noAck: false, consumerTag: tag }),
            catch: (error) => connectionError("consume", error)
          })
          consuming = { channel, tag: reply.consumerTag }
        }),
      onClose: () =>
        Effect.sync(() => {
          consuming = undefined
        })
    })

    return {
      channel: () => openChannel,
      consuming: () => consuming !== undefined && !stopping,
      cancel: (timeout) =>
        Effect.suspend(() => {
          stopping = true
          const current = consuming
          consuming = undefined
          if (current === undefined) return Effect.void
          return Effect.promise(() => current.channel.cancel(current.tag).catch(() => undefined)).pipe(
            Effect.timeoutOption(Duration.max(timeout, Duration.millis(1))),
            Effect.asVoid
          )
        })
    }
  })
