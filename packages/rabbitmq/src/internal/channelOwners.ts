// Channel owners (publishers, consumers): each gets its channels opened on every (re)connect and
// again, after a backoff, when the broker closes one while the connection stays up.
import { describeCause } from "@tidings/core/Errors"
import type { Channel, ConfirmChannel } from "amqplib"
import { Cause, Clock, Deferred, Duration, Effect, Exit, Option, Pull, Schedule, type Scope } from "effect"
import { AmqpConnectionError, type TopologyError } from "../AmqpErrors.ts"
import type * as Topology from "../Topology.ts"
import { scrub } from "./amqpError.ts"
import { closeChannel, createChannel, type Live, type TrackedChannel } from "./amqpSocket.ts"
import type { Core } from "./connectionCore.ts"

/** What a {@link ChannelOwner} gets on every (re)connect to open its channels with. */
export interface Channels {
  /** Which connection this is: 1 for the first, +1 for every reconnect. */
  readonly generation: number
  /** Opens a channel owned by the owner: when it closes, the owner is re-opened. */
  readonly channel: Effect.Effect<Channel, AmqpConnectionError>
  /** Opens a confirm channel owned by the owner. */
  readonly confirmChannel: Effect.Effect<ConfirmChannel, AmqpConnectionError>
  /** Declares a topology on a short-lived channel of its own (a failed declaration closes its channel). */
  readonly declare: (topology: Topology.Topology) => Effect.Effect<void, TopologyError | AmqpConnectionError>
}

/**
 * Something that keeps channels open across reconnects (a publisher, a consumer). `open` runs on
 * every (re)connect and again, after a backoff, whenever one of its channels closes while the
 * connection stays up (e.g. the broker closed it with a channel error).
 */
export interface ChannelOwner {
  readonly name: string
  /** Opens the owner's channels and sets them up (prefetch, consume, listeners). */
  readonly open: (channels: Channels) => Effect.Effect<void, AmqpConnectionError | TopologyError>
  /** The channels opened by the last `open` are gone (closed, or `open` failed half way). */
  readonly onClose?: (reason: AmqpConnectionError | TopologyError) => Effect.Effect<void>
}

export const makeRegister = (c: Core, options: {
  readonly channelRetry: Schedule.Schedule<unknown, AmqpConnectionError | TopologyError>
  readonly closeTimeout: Duration.Duration
}) =>
(owner: ChannelOwner): Effect.Effect<void, AmqpConnectionError | TopologyError, Scope.Scope> =>
  Effect.gen(function*() {
    const { core } = c
    const firstOpen = yield* Deferred.make<void, AmqpConnectionError | TopologyError>()
    const log = Effect.annotateLogs({ owner: owner.name })
    const round = (live: Live) =>
      Effect.gen(function*() {
        const created: Array<TrackedChannel> = []
        const channels: Channels = {
          generation: live.generation,
          channel: createChannel<Channel>(live, false, created),
          confirmChannel: createChannel<ConfirmChannel>(live, true, created),
          declare: (topology) => c.declareOn(live, topology)
        }
        // A blocked connection reads nothing, so a channel close would wait for a close-ok that
        // cannot come: the connection's own close (which amqplib does at once when blocked) takes
        // the channels down instead.
        const closeAll = Effect.suspend(() =>
          live.blocked || Deferred.isDoneUnsafe(live.closed)
            ? Effect.void
            : Effect.forEach(created, (t) => closeChannel(t.channel, options.closeTimeout), {
              concurrency: "unbounded",
              discard: true
            })
        )
        return yield* Effect.gen(function*() {
          const opened = yield* Effect.exit(owner.open(channels))
          if (Exit.isFailure(opened)) {
            yield* closeAll
            if (Cause.hasInterruptsOnly(opened.cause)) {
              return yield* Effect.failCause(opened.cause as Cause.Cause<never>)
            }
            // A defect in an owner must not end its supervision: it is retried like any failure.
            const error = Option.getOrElse(
              Cause.findErrorOption(opened.cause),
              () =>
                new AmqpConnectionError({
                  operation: `open ${owner.name}`,
                  message: scrub(describeCause(opened.cause)),
                  retryable: true
                })
            )
            yield* Deferred.fail(firstOpen, error)
            if (owner.onClose) yield* owner.onClose(error)
            return { opened: false as const, error }
          }
          yield* Deferred.succeed(firstOpen, undefined)
          const reason = created.length === 0
            ? yield* Deferred.await(live.closed)
            : yield* Effect.raceAll(created.map((t) => Deferred.await(t.closed)))
          yield* closeAll
          if (owner.onClose) yield* owner.onClose(reason)
          return { opened: true as const, error: reason }
        }).pipe(Effect.onInterrupt(() => closeAll))
      })
    const loop = Effect.gen(function*() {
      let step = yield* Schedule.toStep(options.channelRetry)
      while (true) {
        const live = yield* c.awaitLive
        const result = yield* round(live)
        if (result.opened) step = yield* Schedule.toStep(options.channelRetry)
        // The connection went down: its reconnect restores us, no backoff of our own.
        if (Deferred.isDoneUnsafe(live.closed) || core.closing) continue
        if (!result.opened) {
          yield* Effect.logWarning(`channel owner ${owner.name} failed to open: ${result.error.message}`).pipe(
            log,
            core.annotate
          )
        }
        const delay = yield* step(yield* Clock.currentTimeMillis, result.error).pipe(
          Effect.map(([, d]) => d),
          Pull.catchDone(() => Effect.succeed(Duration.seconds(5)))
        )
        yield* Effect.raceFirst(Effect.sleep(delay), Deferred.await(live.closed))
      }
    }).pipe(
      // awaitLive fails only at shutdown
      Effect.catchTag("AmqpConnectionError", () => Effect.void)
    )
    yield* Effect.forkScoped(loop)
    if (core.current === undefined || Deferred.isDoneUnsafe(core.current.closed)) return
    // Connected: a configuration problem (a topology the broker refuses) shows at once. A failure
    // that another try can fix (the connection dropped meanwhile) does not fail the caller: the
    // loop above keeps opening the owner, as after any reconnect.
    const first = yield* Effect.exit(Deferred.await(firstOpen))
    if (Exit.isFailure(first)) {
      const error = Option.getOrUndefined(Cause.findErrorOption(first.cause))
      if (error === undefined || !error.isRetryable) return yield* Effect.failCause(first.cause)
      yield* Effect.logWarning(`channel owner ${owner.name}: first open failed (${error.message}); retrying`).pipe(
        log,
        core.annotate
      )
    }
  })
