// The connection's state machine and reconnect loop: Connecting -> Connected <-> Reconnecting ->
// Closed (at shutdown, or when a user's finite reconnect schedule runs out). The default schedule
// never runs out: a worker outlives any broker outage.
import type { Channel, ChannelModel } from "amqplib"
import { Cause, Clock, Deferred, Duration, Effect, Exit, Option, PubSub, Pull, Schedule } from "effect"
import { AmqpConnectionError, type TopologyError } from "../AmqpErrors.ts"
import * as Topology from "../Topology.ts"
import { closeChannel, createChannel, type Live, openModel, type OpenOptions } from "./amqpSocket.ts"

/** The connection's lifecycle. */
export type State =
  | { readonly _tag: "Connecting"; readonly attempt: number; readonly lastError?: AmqpConnectionError }
  | { readonly _tag: "Connected"; readonly generation: number; readonly blocked: boolean; readonly since: number }
  | {
    readonly _tag: "Reconnecting"
    readonly attempt: number
    readonly lastError: AmqpConnectionError
    readonly retryInMs: number
  }
  | { readonly _tag: "Closed"; readonly lastError?: AmqpConnectionError }

export interface CoreOptions {
  readonly url: string
  readonly name: string
  readonly description: string
  readonly connectTimeout: Duration.Duration
  readonly closeTimeout: Duration.Duration
  readonly reconnect: Schedule.Schedule<unknown, AmqpConnectionError>
  readonly topologies: Array<Topology.Topology>
}

const closedError = () =>
  new AmqpConnectionError({ operation: "connection", message: "the connection is closed", retryable: false })

/** The mutable heart of a connection: amqplib's events arrive in plain callbacks, so state lives in variables. */
export const makeCore = (options: CoreOptions) =>
  Effect.gen(function*() {
    const hub = yield* PubSub.unbounded<State>()
    const annotate = Effect.annotateLogs({ amqp: options.description, connection: options.name })
    const core = {
      state: { _tag: "Connecting", attempt: 1 } as State,
      generation: 0,
      current: undefined as Live | undefined,
      liveSignal: Deferred.makeUnsafe<Live>(),
      closing: false,
      // Set while a start-up attempt made by the deadline has reached the broker (and while its
      // one reconnect runs): the start-up timer lets it finish rather than cutting it off.
      reachedInTime: false,
      shutdown: Deferred.makeUnsafe<void>(),
      // Every connection not yet closed, including one opened by an attempt interrupted half way.
      openModels: new Set<ChannelModel>(),
      hub,
      annotate
    }

    const setState = (next: State) => {
      core.state = next
      PubSub.publishUnsafe(hub, next)
    }

    const open: OpenOptions = {
      url: options.url,
      name: options.name,
      connectTimeoutMs: Duration.toMillis(options.connectTimeout),
      onOpen: (model) => void core.openModels.add(model),
      onClose: (model) => {
        core.openModels.delete(model)
        if (core.current !== undefined && core.current.model === model) {
          core.current = undefined
          core.liveSignal = Deferred.makeUnsafe<Live>()
        }
      },
      onBlocked: (model, blocked) => {
        if (core.current?.model !== model) return
        core.current.blocked = blocked
        if (core.state._tag === "Connected") setState({ ...core.state, blocked })
      }
    }

    /** Declares a topology on a short-lived channel of its own (a failed declaration closes its channel). */
    const declareOn = (
      live: Live,
      topology: Topology.Topology
    ): Effect.Effect<void, TopologyError | AmqpConnectionError> =>
      topology.exchanges.length + topology.queues.length + topology.bindings.length === 0
        ? Effect.void
        : Effect.acquireUseRelease(
          Effect.suspend(() => createChannel<Channel>(live, false, [])),
          (channel) => Topology.apply(channel, topology),
          (channel) => closeChannel(channel, options.closeTimeout)
        )

    /** Connects and declares the topology; the connection is closed again if the topology fails. */
    const connectOnce = (
      attempt: number,
      onReached: () => void = () => {}
    ): Effect.Effect<Live, AmqpConnectionError | TopologyError> =>
      Effect.gen(function*() {
        const [model, closed] = yield* openModel(open, attempt, options.description)
        onReached()
        const live: Live = { model, closed, generation: core.generation + 1, blocked: false }
        yield* declareOn(live, Topology.merge(...options.topologies)).pipe(
          Effect.onError(() =>
            Effect.promise(() => model.close().catch(() => undefined)).pipe(Effect.timeoutOption(options.closeTimeout))
          )
        )
        core.generation = live.generation
        return live
      })

    const publishLive = (live: Live) =>
      Effect.gen(function*() {
        if (Deferred.isDoneUnsafe(live.closed)) return false
        core.current = live
        setState({
          _tag: "Connected",
          generation: live.generation,
          blocked: live.blocked,
          since: yield* Clock.currentTimeMillis
        })
        Deferred.doneUnsafe(core.liveSignal, Effect.succeed(live))
        return true
      })

    /**
     * Retries `connectOnce` per the schedule until it succeeds, the schedule ends or `deadline`
     * passes. Near the deadline the last pause is shortened so that an attempt is made at it: a
     * startup timeout of 30 s tries for 30 s, not until the next full backoff would pass it. An
     * attempt made by the deadline that reached the broker and then lost its connection or channel
     * while declaring the topology (a forced close, a broker still booting) is a connection failure
     * like any other: it gets one more attempt (after the usual pause, at most 1 s), even when the
     * deadline has passed meanwhile.
     */
    const connectWithRetry = (initialError: AmqpConnectionError | undefined, deadline: number | undefined) =>
      Effect.gen(function*() {
        const step = yield* Schedule.toStep(options.reconnect)
        let lastError = initialError
        // the attempt that reached the broker by the deadline and then lost the connection while declaring
        let reachedInTime = false
        let graceUsed = false
        for (let attempt = 1;; attempt++) {
          const now = yield* Clock.currentTimeMillis
          if (lastError !== undefined && deadline !== undefined && now >= deadline && reachedInTime && !graceUsed) {
            graceUsed = true
            core.reachedInTime = true
            // a broker just back may need a moment before it can declare: the usual pause, at most 1 s
            const pause = yield* step(now, lastError).pipe(
              Effect.map(([, d]) => Math.min(Duration.toMillis(d), 1000)),
              Pull.catchDone(() => Effect.succeed(0))
            )
            yield* Effect.logWarning(
              `RabbitMQ connection lost while declaring the topology at the start-up deadline; one more attempt in ${pause} ms`
            ).pipe(annotate)
            yield* Effect.sleep(Duration.millis(pause))
          } else if (lastError !== undefined) {
            core.reachedInTime = false
            const next = yield* step(now, lastError).pipe(
              Effect.map(([, d]) => Duration.toMillis(d)),
              Pull.catchDone(() => Effect.succeed(undefined))
            )
            if (next === undefined || (deadline !== undefined && now >= deadline)) return yield* Effect.fail(lastError)
            const delay = deadline === undefined ? next : Math.min(next, deadline - now)
            setState(
              initialError === undefined && core.generation === 0
                ? { _tag: "Connecting", attempt, lastError }
                : { _tag: "Reconnecting", attempt, lastError, retryInMs: delay }
            )
            yield* Effect.sleep(Duration.millis(delay))
          }
          // every attempt of the loop is made by the deadline (the loop fails instead once it passed)
          let reached = false
          const exit = yield* Effect.exit(connectOnce(attempt, () => {
            reached = true
            if (deadline !== undefined) core.reachedInTime = true
          }))
          if (Exit.isSuccess(exit)) {
            if (yield* publishLive(exit.value)) return exit.value
            lastError = yield* Deferred.await(exit.value.closed)
            reachedInTime = deadline !== undefined
            continue
          }
          const error = Option.getOrUndefined(Cause.findErrorOption(exit.cause))
          if (error === undefined) return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
          if (!error.isRetryable && core.generation === 0) return yield* Effect.fail(error)
          reachedInTime = deadline !== undefined && reached
          const asConnection = error._tag === "AmqpConnectionError"
            ? error
            : new AmqpConnectionError({
              operation: "topology",
              message: `${error.entity}: ${error.message}`,
              retryable: true,
              ...(error.code === undefined ? {} : { code: error.code })
            })
          yield* Effect.logWarning(`RabbitMQ connection attempt ${attempt} failed: ${asConnection.message}`).pipe(
            annotate
          )
          lastError = asConnection
        }
      })

    /** Reconnects after every loss, for as long as the connection lives (or its schedule allows). */
    const supervise = (first: Live) =>
      Effect.gen(function*() {
        let live = first
        while (true) {
          const reason = yield* Deferred.await(live.closed)
          if (core.closing) return
          yield* Effect.logWarning(`RabbitMQ connection lost (${reason.message}); reconnecting`).pipe(annotate)
          const next = yield* Effect.exit(connectWithRetry(reason, undefined))
          if (Exit.isFailure(next)) {
            const error = Option.getOrUndefined(Cause.findErrorOption(next.cause))
            yield* Effect.logError("RabbitMQ reconnect schedule exhausted; the connection stays closed", next.cause)
              .pipe(annotate)
            setState({ _tag: "Closed", ...(error?._tag === "AmqpConnectionError" ? { lastError: error } : {}) })
            return
          }
          live = next.value
          yield* Effect.logInfo(`RabbitMQ reconnected (generation ${live.generation})`).pipe(annotate)
        }
      })

    /** The open connection, waiting for the next one when there is none; fails once shutdown began. */
    const awaitLive: Effect.Effect<Live, AmqpConnectionError> = Effect.suspend(() => {
      if (core.closing) return Effect.fail(closedError())
      if (core.current !== undefined && !Deferred.isDoneUnsafe(core.current.closed)) return Effect.succeed(core.current)
      return Effect.raceFirst(
        Deferred.await(core.liveSignal),
        Effect.andThen(Deferred.await(core.shutdown), Effect.fail(closedError()))
      )
    })

    const readyNow = () => core.state._tag === "Connected" && !core.state.blocked && core.current !== undefined

    return { core, setState, declareOn, connectWithRetry, supervise, awaitLive, readyNow }
  })

export type Core = Effect.Success<ReturnType<typeof makeCore>>
