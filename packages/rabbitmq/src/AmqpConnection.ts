/**
 * A RabbitMQ connection that heals itself. One AMQP connection per layer; after a network drop, a
 * forced close or a broker restart it reconnects with a `Schedule` backoff, declares the topology
 * again and re-opens the channels of every registered {@link ChannelOwner} (publisher channels,
 * consumers with their prefetch), so that the rest of the program never holds a dead channel.
 *
 * The URL's credentials are kept `Redacted`: they are scrubbed from every error and never logged or
 * put on a span; {@link Service.description} is the URL without them.
 * @module
 */
import * as amqp from "amqplib"
import type { Channel, ChannelModel, ConfirmChannel } from "amqplib"
import * as Health from "@tidings/core/Health"
import * as Retry from "@tidings/core/Retry"
import {
  Cause,
  Clock,
  Context,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Layer,
  Option,
  PubSub,
  Pull,
  Redacted,
  Schedule,
  type Scope,
  Stream
} from "effect"
import { AmqpConfigError, AmqpConnectionError, type TopologyError } from "./AmqpErrors.ts"
import { connectionError, scrub } from "./internal/amqpError.ts"
import * as Topology from "./Topology.ts"

/** Settings of {@link layer}. Only `url` is required. */
export interface Config {
  /** `amqp://user:password@host:port/vhost` (or `amqps://`); query parameters such as `frameMax` pass through. */
  readonly url: Redacted.Redacted<string> | string
  /** Delay before each reconnect attempt (default: 1 s doubling to a 30 s cap, jittered). Restarted after every successful connect. */
  readonly reconnect?: Schedule.Schedule<unknown, AmqpConnectionError>
  /** AMQP heartbeat; a peer silent for about twice this long is considered gone (default 10 s; 0 turns heartbeats off). */
  readonly heartbeat?: Duration.Input
  /** Give up a connection attempt after this long (default 10 s). */
  readonly connectTimeout?: Duration.Input
  /**
   * How long building the layer keeps retrying a retryable first connection (refused, reset) per
   * `reconnect` before failing (default 30 s). A non-retryable failure (bad credentials, unknown
   * vhost) fails at once.
   */
  readonly startupTimeout?: Duration.Input
  /** Declared on every (re)connect, before any channel owner re-opens. */
  readonly topology?: Topology.Topology
  /** Shown as the connection name in the broker's management tools (default `tidings`). */
  readonly name?: string
  /** Backoff between re-opens of a channel that the broker closed while the connection stayed up (default 100 ms doubling to 5 s). */
  readonly channelRetry?: Schedule.Schedule<unknown, AmqpConnectionError | TopologyError>
}

/** The connection's lifecycle. */
export type State =
  | { readonly _tag: "Connecting"; readonly attempt: number; readonly lastError?: AmqpConnectionError }
  | { readonly _tag: "Connected"; readonly generation: number; readonly blocked: boolean; readonly since: number }
  | { readonly _tag: "Reconnecting"; readonly attempt: number; readonly lastError: AmqpConnectionError; readonly retryInMs: number }
  | { readonly _tag: "Closed"; readonly lastError?: AmqpConnectionError }

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

/** The connection service. */
export interface Service {
  /** The broker URL without credentials, for logs: `amqp://host:port/vhost`. */
  readonly description: string
  readonly state: Effect.Effect<State>
  /** The current state, then every change. */
  readonly changes: Stream.Stream<State>
  /** Connected and not blocked by a broker resource alarm: for readiness checks. */
  readonly isReady: Effect.Effect<boolean>
  /** Waits until connected; fails with the last connection error after `timeout`. */
  readonly awaitReady: (timeout: Duration.Input) => Effect.Effect<void, AmqpConnectionError>
  /** Adds a topology to the one declared on every reconnect, and declares it now if connected. */
  readonly declare: (topology: Topology.Topology) => Effect.Effect<void, TopologyError | AmqpConnectionError>
  /**
   * Registers a channel owner for as long as the scope lives. When connected, waits for its first
   * `open` and fails with its error; otherwise it opens on the next connect.
   */
  readonly register: (owner: ChannelOwner) => Effect.Effect<void, AmqpConnectionError | TopologyError, Scope.Scope>
  /** Closes the current connection from this side; it reconnects per the schedule (for tests and credential rotation). */
  readonly restart: Effect.Effect<void>
  /** Removes the URL's credentials from a text (for owners that format broker errors). */
  readonly scrub: (text: string) => string
}

/** The connection of a layer. */
export class AmqpConnection extends Context.Service<AmqpConnection, Service>()("@tidings/rabbitmq/AmqpConnection") {}

/** The default reconnect schedule: 1 s doubling to a 30 s cap, jittered. */
export const defaultReconnect: Schedule.Schedule<unknown, AmqpConnectionError> = Retry.exponentialBackoff({ base: "1 second", max: "30 seconds" })

const defaultChannelRetry: Schedule.Schedule<unknown, AmqpConnectionError | TopologyError> = Retry.exponentialBackoff({
  base: "100 millis",
  max: "5 seconds"
})

interface ResolvedUrl {
  readonly url: string
  readonly description: string
  readonly secrets: ReadonlyArray<string>
}

/** Validates the URL; neither the URL nor its parts appear in the error. */
const resolveUrl = (input: Redacted.Redacted<string> | string, heartbeatSeconds: number): Effect.Effect<ResolvedUrl, AmqpConfigError> =>
  Effect.gen(function*() {
    const raw: unknown = Redacted.isRedacted(input) ? Redacted.value(input) : input
    if (typeof raw !== "string" || !/^amqps?:\/\//i.test(raw)) {
      return yield* new AmqpConfigError({ path: "url", message: "must be an amqp:// or amqps:// URL" })
    }
    let url: URL
    try {
      url = new URL(raw)
    } catch {
      // The URL error's message would repeat the URL, password included.
      return yield* new AmqpConfigError({ path: "url", message: "is not a valid URL" })
    }
    const secrets = new Set<string>()
    for (const part of [url.password, url.username]) {
      if (part === "") continue
      secrets.add(part)
      try {
        secrets.add(decodeURIComponent(part))
      } catch {
        // keep the encoded form only
      }
    }
    url.searchParams.set("heartbeat", String(heartbeatSeconds))
    const vhost = url.pathname === "" ? "/" : url.pathname
    return {
      url: url.toString(),
      description: `${url.protocol}//${url.host}${vhost}`,
      // Longest first, so that a password containing the user name is removed whole.
      secrets: [...secrets].sort((a, b) => b.length - a.length)
    }
  })

/** One open AMQP connection. */
interface Live {
  readonly model: ChannelModel
  readonly generation: number
  /** Completed (with the reason) when the connection closes, for whatever reason. */
  readonly closed: Deferred.Deferred<AmqpConnectionError>
}

interface TrackedChannel {
  readonly channel: Channel
  readonly closed: Deferred.Deferred<AmqpConnectionError>
}

const closeQuietly = (closable: { close(): Promise<void> }): Effect.Effect<void> =>
  Effect.promise(() => closable.close().catch(() => undefined)).pipe(Effect.timeoutOption("5 seconds"), Effect.asVoid)

const millis = (input: Duration.Input | undefined, fallback: Duration.Input, path: string, allowZero: boolean) => {
  const d = Duration.fromInput(input ?? fallback)
  const ms = Option.isSome(d) ? Duration.toMillis(d.value) : NaN
  if (!Number.isFinite(ms) || ms < 0 || (!allowZero && ms === 0)) {
    return Effect.fail(new AmqpConfigError({ path, message: `must be a finite ${allowZero ? "non-negative" : "positive"} duration` }))
  }
  return Effect.succeed(ms)
}

/** Builds the service; the connection closes when the scope does. */
export const make = (config: Config): Effect.Effect<Service, AmqpConfigError | AmqpConnectionError | TopologyError, Scope.Scope> =>
  Effect.gen(function*() {
    const heartbeatMs = yield* millis(config.heartbeat, "10 seconds", "heartbeat", true)
    const connectTimeoutMs = yield* millis(config.connectTimeout, "10 seconds", "connectTimeout", false)
    const startupTimeoutMs = yield* millis(config.startupTimeout, "30 seconds", "startupTimeout", true)
    const resolved = yield* resolveUrl(config.url, Math.ceil(heartbeatMs / 1000))
    const { secrets, description } = resolved
    const reconnect = config.reconnect ?? defaultReconnect
    const channelRetry = config.channelRetry ?? defaultChannelRetry
    const connectionName = config.name ?? "tidings"
    const topologies: Array<Topology.Topology> = config.topology === undefined ? [] : [config.topology]

    // State lives in plain variables because amqplib's events arrive in plain callbacks; every
    // change is also published for `changes`.
    const hub = yield* PubSub.unbounded<State>()
    let state: State = { _tag: "Connecting", attempt: 1 }
    const setState = (next: State) => {
      state = next
      PubSub.publishUnsafe(hub, next)
    }
    let generation = 0
    let current: Live | undefined
    let liveSignal = Deferred.makeUnsafe<Live>()
    let closing = false
    const shutdown = Deferred.makeUnsafe<void>()
    // Every connection not yet closed, including one opened by an attempt that was interrupted
    // half way (e.g. during topology): shutdown closes them all.
    const openModels = new Set<ChannelModel>()

    const annotate = Effect.annotateLogs({ amqp: description, connection: connectionName })

    /** Opens an AMQP connection; its listeners are attached before anything can be emitted. */
    const openModel = (attempt: number) =>
      Effect.callback<readonly [ChannelModel, Deferred.Deferred<AmqpConnectionError>], AmqpConnectionError>((resume) => {
        let abandoned = false
        const closed = Deferred.makeUnsafe<AmqpConnectionError>()
        amqp.connect(resolved.url, {
          timeout: connectTimeoutMs,
          noDelay: true,
          clientProperties: { connection_name: connectionName }
        }).then(
          (model) => {
            let lastError: unknown
            // Without an 'error' listener an EventEmitter throws, which would crash the process.
            model.on("error", (error: unknown) => void (lastError = error))
            openModels.add(model)
            model.on("close", (error?: unknown) => {
              openModels.delete(model)
              const reason = connectionError("connection", error ?? lastError ?? "connection closed", secrets)
              Deferred.doneUnsafe(closed, Effect.succeed(reason))
              if (current !== undefined && current.model === model) {
                current = undefined
                liveSignal = Deferred.makeUnsafe<Live>()
              }
            })
            model.on("blocked", () => {
              if (state._tag === "Connected" && current?.model === model) setState({ ...state, blocked: true })
            })
            model.on("unblocked", () => {
              if (state._tag === "Connected" && current?.model === model) setState({ ...state, blocked: false })
            })
            if (abandoned) return void model.close().catch(() => undefined)
            resume(Effect.succeed([model, closed] as const))
          },
          (error: unknown) => resume(Effect.fail(connectionError("connect", error, secrets)))
        )
        return Effect.sync(() => void (abandoned = true))
      }).pipe(
        Effect.timeoutOrElse({
          duration: connectTimeoutMs + 1000,
          orElse: () => Effect.fail(new AmqpConnectionError({ operation: "connect", message: "connection attempt timed out", retryable: true }))
        }),
        Effect.withSpan("tidings.amqp.connect", { attributes: { "server.address": description, "tidings.amqp.attempt": attempt } })
      )

    const trackChannel = (channel: Channel): TrackedChannel => {
      const closed = Deferred.makeUnsafe<AmqpConnectionError>()
      let lastError: unknown
      channel.on("error", (error: unknown) => void (lastError = error))
      channel.once("close", () => Deferred.doneUnsafe(closed, Effect.succeed(connectionError("channel", lastError ?? "channel closed", secrets))))
      return { channel, closed }
    }

    const createChannel = <C extends Channel>(live: Live, confirm: boolean, created: Array<TrackedChannel>) =>
      Effect.callback<C, AmqpConnectionError>((resume) => {
        let abandoned = false
        let promise: Promise<Channel>
        try {
          promise = confirm ? live.model.createConfirmChannel() : live.model.createChannel()
        } catch (error) {
          return resume(Effect.fail(connectionError("createChannel", error, secrets)))
        }
        promise.then(
          (channel) => {
            const tracked = trackChannel(channel)
            if (abandoned) return void channel.close().catch(() => undefined)
            created.push(tracked)
            resume(Effect.succeed(channel as C))
          },
          (error: unknown) => resume(Effect.fail(connectionError("createChannel", error, secrets)))
        )
        return Effect.sync(() => void (abandoned = true))
      })

    const declareOn = (live: Live, topology: Topology.Topology): Effect.Effect<void, TopologyError | AmqpConnectionError> =>
      topology.exchanges.length + topology.queues.length + topology.bindings.length === 0
        ? Effect.void
        : Effect.acquireUseRelease(
          Effect.suspend(() => createChannel<Channel>(live, false, [])),
          (channel) => Topology.apply(channel, topology, secrets),
          (channel) => closeQuietly(channel)
        )

    /** Connects and declares the topology; the connection is closed again if the topology fails. */
    const connectOnce = (attempt: number): Effect.Effect<Live, AmqpConnectionError | TopologyError> =>
      Effect.gen(function*() {
        const [model, closed] = yield* openModel(attempt)
        const live: Live = { model, closed, generation: generation + 1 }
        yield* declareOn(live, Topology.merge(...topologies)).pipe(Effect.onError(() => closeQuietly(model)))
        generation = live.generation
        return live
      })

    const publishLive = (live: Live) =>
      Effect.gen(function*() {
        if (Deferred.isDoneUnsafe(live.closed)) return false
        current = live
        setState({ _tag: "Connected", generation: live.generation, blocked: false, since: yield* Clock.currentTimeMillis })
        Deferred.doneUnsafe(liveSignal, Effect.succeed(live))
        return true
      })

    /** Retries `connectOnce` per the schedule until it succeeds, the schedule ends or `deadline` passes. */
    const connectWithRetry = (initialError: AmqpConnectionError | undefined, deadline: number | undefined) =>
      Effect.gen(function*() {
        const step = yield* Schedule.toStep(reconnect)
        let lastError = initialError
        for (let attempt = 1;; attempt++) {
          if (lastError !== undefined) {
            const delay = yield* step(yield* Clock.currentTimeMillis, lastError).pipe(
              Effect.map(([, d]) => Duration.toMillis(d)),
              Pull.catchDone(() => Effect.succeed(undefined))
            )
            const now = yield* Clock.currentTimeMillis
            if (delay === undefined || (deadline !== undefined && now + delay > deadline)) return yield* Effect.fail(lastError)
            setState(initialError === undefined && generation === 0
              ? { _tag: "Connecting", attempt, lastError }
              : { _tag: "Reconnecting", attempt, lastError, retryInMs: delay })
            yield* Effect.sleep(delay)
          }
          const exit = yield* Effect.exit(connectOnce(attempt))
          if (Exit.isSuccess(exit)) {
            if (yield* publishLive(exit.value)) return exit.value
            lastError = yield* Deferred.await(exit.value.closed)
            continue
          }
          const error = Option.getOrUndefined(Cause.findErrorOption(exit.cause))
          if (error === undefined) return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
          if (!error.isRetryable && generation === 0) return yield* Effect.fail(error)
          const asConnection = error._tag === "AmqpConnectionError"
            ? error
            : new AmqpConnectionError({ operation: "topology", message: `${error.entity}: ${error.message}`, retryable: true, ...(error.code === undefined ? {} : { code: error.code }) })
          yield* Effect.logWarning(`RabbitMQ connection attempt ${attempt} failed: ${asConnection.message}`).pipe(annotate)
          lastError = asConnection
        }
      })

    // First connection: part of building the layer, so that a wrong password or host shows at once.
    const started = yield* Clock.currentTimeMillis
    const first = yield* connectWithRetry(undefined, started + startupTimeoutMs).pipe(
      Effect.tapError((error) => Effect.sync(() => setState({ _tag: "Closed", ...(error._tag === "AmqpConnectionError" ? { lastError: error } : {}) })))
    )
    yield* Effect.logDebug("RabbitMQ connected").pipe(annotate)

    const supervise = Effect.gen(function*() {
      let live = first
      while (true) {
        const reason = yield* Deferred.await(live.closed)
        if (closing) return
        yield* Effect.logWarning(`RabbitMQ connection lost (${reason.message}); reconnecting`).pipe(annotate)
        const next = yield* Effect.exit(connectWithRetry(reason, undefined))
        if (Exit.isFailure(next)) {
          const error = Option.getOrUndefined(Cause.findErrorOption(next.cause))
          yield* Effect.logError("RabbitMQ reconnect schedule exhausted; the connection stays closed", next.cause).pipe(annotate)
          setState({ _tag: "Closed", ...(error?._tag === "AmqpConnectionError" ? { lastError: error } : {}) })
          return
        }
        live = next.value
        yield* Effect.logInfo(`RabbitMQ reconnected (generation ${live.generation})`).pipe(annotate)
      }
    })
    const supervisor = yield* Effect.forkScoped(supervise)

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        closing = true
        yield* Fiber.interrupt(supervisor)
        current = undefined
        yield* Effect.forEach([...openModels], closeQuietly, { concurrency: "unbounded", discard: true })
        Deferred.doneUnsafe(shutdown, Effect.void)
        setState({ _tag: "Closed" })
      })
    )

    /** The open connection, waiting for the next one when there is none; interrupted at shutdown. */
    const awaitLive: Effect.Effect<Live, AmqpConnectionError> = Effect.suspend(() => {
      if (closing) return Effect.fail(new AmqpConnectionError({ operation: "connection", message: "the connection is closed", retryable: false }))
      if (current !== undefined && !Deferred.isDoneUnsafe(current.closed)) return Effect.succeed(current)
      return Effect.raceFirst(
        Deferred.await(liveSignal),
        Effect.andThen(
          Deferred.await(shutdown),
          Effect.fail(new AmqpConnectionError({ operation: "connection", message: "the connection is closed", retryable: false }))
        )
      )
    })

    const register = (owner: ChannelOwner): Effect.Effect<void, AmqpConnectionError | TopologyError, Scope.Scope> =>
      Effect.gen(function*() {
        const firstOpen = yield* Deferred.make<void, AmqpConnectionError | TopologyError>()
        const log = Effect.annotateLogs({ owner: owner.name })
        const round = (live: Live) =>
          Effect.gen(function*() {
            const created: Array<TrackedChannel> = []
            const channels: Channels = {
              generation: live.generation,
              channel: createChannel<Channel>(live, false, created),
              confirmChannel: createChannel<ConfirmChannel>(live, true, created),
              declare: (topology) => declareOn(live, topology)
            }
            const closeAll = Effect.forEach(created, (t) => closeQuietly(t.channel), { discard: true })
            return yield* Effect.gen(function*() {
              const opened = yield* Effect.exit(owner.open(channels))
              if (Exit.isFailure(opened)) {
                yield* closeAll
                if (Cause.hasInterruptsOnly(opened.cause)) return yield* Effect.failCause(opened.cause as Cause.Cause<never>)
                // A defect in an owner must not end its supervision: it is retried like any failure.
                const error = Option.getOrElse(
                  Cause.findErrorOption(opened.cause),
                  () => new AmqpConnectionError({ operation: `open ${owner.name}`, message: scrub(Cause.pretty(opened.cause), secrets), retryable: true })
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
          let step = yield* Schedule.toStep(channelRetry)
          while (true) {
            const live = yield* awaitLive
            const result = yield* round(live)
            if (result.opened) step = yield* Schedule.toStep(channelRetry)
            // The connection went down: its reconnect restores us, no backoff of our own.
            if (Deferred.isDoneUnsafe(live.closed) || closing) continue
            if (!result.opened) {
              yield* Effect.logWarning(`channel owner ${owner.name} failed to open: ${result.error.message}`).pipe(log, annotate)
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
        if (current !== undefined && !Deferred.isDoneUnsafe(current.closed)) yield* Deferred.await(firstOpen)
      })

    const readyNow = () => state._tag === "Connected" && !state.blocked && current !== undefined
    const service: Service = {
      description,
      state: Effect.sync(() => state),
      changes: Stream.unwrap(Effect.map(PubSub.subscribe(hub), (subscription) =>
        Stream.concat(Stream.sync(() => state), Stream.fromSubscription(subscription))
      )),
      isReady: Effect.sync(readyNow),
      awaitReady: (timeout) =>
        Effect.suspend(() => readyNow() ? Effect.void : Effect.asVoid(awaitLive)).pipe(
          Effect.timeoutOrElse({
            duration: timeout,
            orElse: () =>
              Effect.fail(
                "lastError" in state && state.lastError !== undefined
                  ? state.lastError
                  : new AmqpConnectionError({ operation: "awaitReady", message: `not connected within ${Duration.format(Duration.fromInputUnsafe(timeout))}`, retryable: true })
              )
          })
        ),
      declare: (topology) =>
        Effect.suspend(() => {
          topologies.push(topology)
          return current === undefined ? Effect.void : declareOn(current, topology)
        }),
      register,
      restart: Effect.suspend(() => current === undefined ? Effect.void : closeQuietly(current.model)),
      scrub: (text) => scrub(text, secrets)
    }
    return service
  }).pipe(Effect.annotateLogs({ component: "AmqpConnection" }))

/**
 * Provides the {@link AmqpConnection}. Building it connects (retrying a refused connection for up to
 * `startupTimeout`) and declares `topology`; releasing it closes the connection after the owners
 * registered on it (publishers, consumers) have shut down.
 */
export const layer = (config: Config): Layer.Layer<AmqpConnection, AmqpConfigError | AmqpConnectionError | TopologyError> =>
  Layer.effect(AmqpConnection, make(config))

const describeState = (state: State): string => {
  switch (state._tag) {
    case "Connected":
      return state.blocked ? "the broker blocked the connection (resource alarm)" : "the connection is being set up"
    case "Connecting":
      return `connecting (attempt ${state.attempt})${state.lastError === undefined ? "" : `: ${state.lastError.message}`}`
    case "Reconnecting":
      return `reconnecting (attempt ${state.attempt}): ${state.lastError.message}`
    case "Closed":
      return "the connection is closed"
  }
}

/**
 * A readiness check (`Health.Check`) named `rabbitmq` (or `name`, for an app with a publishing and a
 * consuming connection): connected and not blocked by a resource alarm. Its message says why not
 * (credentials are scrubbed from connection errors).
 */
export const readiness = (name = "rabbitmq"): Health.Check<AmqpConnection> => ({
  name,
  run: AmqpConnection.use((connection) =>
    Effect.flatMap(connection.isReady, (ready) =>
      ready
        ? Effect.void
        : Effect.flatMap(connection.state, (state) => Effect.fail(new Health.CheckFailed({ check: name, message: describeState(state) }))))
  )
})
