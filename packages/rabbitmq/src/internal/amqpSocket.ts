// amqplib's connection and channels as Effects: opening a connection with its listeners attached
// before anything can be emitted, opening channels that report their close, and closing within a
// bound (a broker that blocks the connection or stopped answering never holds up a shutdown).
import * as Tracing from "@tidings/core/Tracing"
import type { Channel, ChannelModel } from "amqplib"
import * as amqp from "amqplib"
import { Deferred, Duration, Effect } from "effect"
import type { AmqpConnectionError } from "../AmqpErrors.ts"
import { AmqpConnectionError as ConnectionError } from "../AmqpErrors.ts"
import { connectionError } from "./amqpError.ts"

/** One open AMQP connection. */
export interface Live {
  readonly model: ChannelModel
  readonly generation: number
  /** Completed (with the reason) when the connection closes, for whatever reason. */
  readonly closed: Deferred.Deferred<AmqpConnectionError>
  /** The broker blocked this connection (a resource alarm): it reads nothing from it until unblocked. */
  blocked: boolean
}

/** A channel with the reason it closed, once it has. */
export interface TrackedChannel {
  readonly channel: Channel
  readonly closed: Deferred.Deferred<AmqpConnectionError>
}

export interface OpenOptions {
  readonly url: string
  readonly name: string
  readonly connectTimeoutMs: number
  /** Called for every connection opened (also one abandoned half way), so that shutdown finds it. */
  readonly onOpen: (model: ChannelModel) => void
  readonly onClose: (model: ChannelModel) => void
  readonly onBlocked: (model: ChannelModel, blocked: boolean) => void
}

/** Opens an AMQP connection; its listeners are attached before anything can be emitted. */
export const openModel = (options: OpenOptions, attempt: number, description: string) =>
  Effect.callback<readonly [ChannelModel, Deferred.Deferred<AmqpConnectionError>], AmqpConnectionError>((resume) => {
    let abandoned = false
    const closed = Deferred.makeUnsafe<AmqpConnectionError>()
    amqp.connect(options.url, {
      timeout: options.connectTimeoutMs,
      noDelay: true,
      clientProperties: { connection_name: options.name }
    }).then(
      (model) => {
        let lastError: unknown
        // Without an 'error' listener an EventEmitter throws, which would crash the process.
        model.on("error", (error: unknown) => void (lastError = error))
        options.onOpen(model)
        model.on("close", (error?: unknown) => {
          options.onClose(model)
          Deferred.doneUnsafe(
            closed,
            Effect.succeed(connectionError("connection", error ?? lastError ?? "connection closed"))
          )
        })
        model.on("blocked", () => options.onBlocked(model, true))
        model.on("unblocked", () => options.onBlocked(model, false))
        if (abandoned) return void closeModel(model, 1000)
        resume(Effect.succeed([model, closed] as const))
      },
      (error: unknown) => resume(Effect.fail(connectionError("connect", error)))
    )
    return Effect.sync(() => void (abandoned = true))
  }).pipe(
    Effect.timeoutOrElse({
      duration: options.connectTimeoutMs + 1000,
      orElse: () =>
        Effect.fail(
          new ConnectionError({ operation: "connect", message: "connection attempt timed out", retryable: true })
        )
    }),
    Effect.withSpan("tidings.amqp.connect", {
      attributes: {
        ...Tracing.serverOf(description, 5672),
        "network.protocol.name": "amqp",
        "tidings.amqp.attempt": attempt
      }
    })
  )

/** Watches a channel: `closed` completes with the reason when it closes. */
export const trackChannel = (channel: Channel): TrackedChannel => {
  const closed = Deferred.makeUnsafe<AmqpConnectionError>()
  let lastError: unknown
  channel.on("error", (error: unknown) => void (lastError = error))
  channel.once(
    "close",
    () => Deferred.doneUnsafe(closed, Effect.succeed(connectionError("channel", lastError ?? "channel closed")))
  )
  return { channel, closed }
}

/** Opens a channel (a confirm channel with `confirm`) and adds it to `created`. */
export const createChannel = <C extends Channel>(live: Live, confirm: boolean, created: Array<TrackedChannel>) =>
  Effect.callback<C, AmqpConnectionError>((resume) => {
    let abandoned = false
    let promise: Promise<Channel>
    try {
      promise = confirm ? live.model.createConfirmChannel() : live.model.createChannel()
    } catch (error) {
      return resume(Effect.fail(connectionError("createChannel", error)))
    }
    promise.then(
      (channel) => {
        const tracked = trackChannel(channel)
        if (abandoned) return void channel.close().catch(() => undefined)
        created.push(tracked)
        resume(Effect.succeed(channel as C))
      },
      (error: unknown) => resume(Effect.fail(connectionError("createChannel", error)))
    )
    return Effect.sync(() => void (abandoned = true))
  })

/** The socket under an amqplib connection (not in its types). */
const socketOf = (model: ChannelModel): { destroy?: () => void } | undefined =>
  (model as unknown as { readonly connection?: { readonly stream?: { destroy?: () => void } } }).connection?.stream

/**
 * Closes a connection: the AMQP close handshake for up to `timeoutMs`, then the socket is
 * destroyed (a broker that does not answer, or blocks the connection, cannot hold a shutdown up).
 */
export const closeModel = (model: ChannelModel, timeoutMs: number): Promise<void> =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      try {
        socketOf(model)?.destroy?.()
      } catch {
        // already gone
      }
      resolve()
    }, timeoutMs)
    model.close().catch(() => undefined).finally(() => {
      clearTimeout(timer)
      resolve()
    })
  })

/** Closes a connection within `timeout` (see {@link closeModel}). */
export const closeConnection = (model: ChannelModel, timeout: Duration.Duration): Effect.Effect<void> =>
  Effect.promise(() => closeModel(model, Duration.toMillis(timeout)))

/** Closes a channel, waiting at most `timeout` for the broker's close-ok. */
export const closeChannel = (channel: Channel, timeout: Duration.Duration): Effect.Effect<void> =>
  Effect.promise(() => channel.close().catch(() => undefined)).pipe(Effect.timeoutOption(timeout), Effect.asVoid)
