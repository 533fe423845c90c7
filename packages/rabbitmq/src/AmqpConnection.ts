/**
 * A RabbitMQ connection that heals itself. One AMQP connection per layer; after a network drop, a
 * forced close or a broker restart it reconnects with a capped backoff — forever by default, so a
 * worker outlives any outage — declares the topology again and re-opens the channels of every
 * registered {@link ChannelOwner} (publisher channels, consumers with their prefetch), so that the
 * rest of the program never holds a dead channel.
 *
 * Closing is bounded: channels and the connection get `closeTimeout` for the broker's close-ok, and
 * a connection the broker blocked (a resource alarm) is closed at once.
 *
 * The URL is kept `Redacted`: it never appears in an error, a log or a span, and error texts are
 * scrubbed of credentials; {@link Service.description} is the URL without them.
 * @since 0.1.0
 * @module
 */
import type { InvalidConfig } from "@tidings/core/Errors"
import * as Health from "@tidings/core/Health"
import * as Retry from "@tidings/core/Retry"
import * as Settings from "@tidings/core/Settings"
import {
  Context,
  Deferred,
  Duration,
  Effect,
  Fiber,
  Layer,
  PubSub,
  type Redacted,
  Schedule,
  Schema,
  type Scope,
  Stream
} from "effect"
import { AmqpConnectionError, type TopologyError } from "./AmqpErrors.ts"
import { scrub } from "./internal/amqpError.ts"
import { closeConnection } from "./internal/amqpSocket.ts"
import { resolveUrl } from "./internal/amqpUrl.ts"
import { type ChannelOwner, type Channels, makeRegister } from "./internal/channelOwners.ts"
import { makeCore, type State } from "./internal/connectionCore.ts"
import type * as Topology from "./Topology.ts"

export type { ChannelOwner, Channels, State }

/**
 * Settings of {@link layer}. Only `url` is required.
 * @since 0.1.0
 * @category models
 */
export interface Config {
  /** `amqp://user:password@host:port/vhost` (or `amqps://`); query parameters such as `frameMax` pass through. */
  readonly url: Redacted.Redacted<string> | string
  /**
   * Delay before each reconnect attempt. Default: `reconnectDelay` (1 s) doubling to
   * `reconnectMaxDelay` (30 s), jittered, forever. A schedule that ends leaves the connection
   * `Closed` (the workers on it then wait); restarted after every successful connect.
   */
  readonly reconnect?: Schedule.Schedule<unknown, AmqpConnectionError>
  /** First delay of the default reconnect backoff (default 1 s). */
  readonly reconnectDelay?: Duration.Input
  /** Cap of the default reconnect backoff (default 30 s). */
  readonly reconnectMaxDelay?: Duration.Input
  /** AMQP heartbeat; a peer silent for about twice this long is considered gone (default 10 s; 0 turns heartbeats off). */
  readonly heartbeat?: Duration.Input
  /** Give up a connection attempt after this long (default 10 s). */
  readonly connectTimeout?: Duration.Input
  /**
   * How long building the layer keeps retrying a retryable first connection (refused, reset)
   * before failing (default 30 s), to the end: the last pause is shortened so that an attempt is made
   * at the deadline (and given at most a second more to answer). A connection lost while the
   * topology is declared is retried like a refused one; if that happens on the attempt at the
   * deadline, it gets one more attempt (after at most a second). A non-retryable failure (bad
   * credentials, unknown vhost, a refused declaration) fails at once.
   */
  readonly startupTimeout?: Duration.Input
  /** How long closing waits for the broker's close-ok of a channel or the connection before dropping the socket (default 1 s). */
  readonly closeTimeout?: Duration.Input
  /** Declared on every (re)connect, before any channel owner re-opens. */
  readonly topology?: Topology.Topology
  /** Shown as the connection name in the broker's management tools (default `tidings`). */
  readonly name?: string
  /** Backoff between re-opens of a channel that the broker closed while the connection stayed up (default 100 ms doubling to 5 s). */
  readonly channelRetry?: Schedule.Schedule<unknown, AmqpConnectionError | TopologyError>
}

/**
 * The settings of {@link Config} that are data, with their defaults.
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema: Schema.Struct<{
  readonly url: Schema.Codec<Redacted.Redacted<string>, string | Redacted.Redacted<string>>
  readonly reconnectDelay: Settings.Defaulted<Settings.DurationSetting>
  readonly reconnectMaxDelay: Settings.Defaulted<Settings.DurationSetting>
  readonly heartbeat: Settings.Defaulted<Settings.DurationSetting>
  readonly connectTimeout: Settings.Defaulted<Settings.DurationSetting>
  readonly startupTimeout: Settings.Defaulted<Settings.DurationSetting>
  readonly closeTimeout: Settings.Defaulted<Settings.DurationSetting>
  readonly name: Settings.Defaulted<Schema.String>
}> = Schema.Struct({
  url: Settings.secret({
    check: (url) => /^amqps?:\/\//i.test(url) ? undefined : "must be an amqp:// or amqps:// URL"
  }),
  reconnectDelay: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("1 second"))),
  reconnectMaxDelay: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("30 seconds"))),
  heartbeat: Settings.duration({ allowZero: true }).pipe(
    Schema.withDecodingDefault(Effect.succeed<Duration.Input>("10 seconds"))
  ),
  connectTimeout: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("10 seconds"))),
  startupTimeout: Settings.duration({ allowZero: true }).pipe(
    Schema.withDecodingDefault(Effect.succeed<Duration.Input>("30 seconds"))
  ),
  closeTimeout: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("1 second"))),
  name: Schema.String.check(
    Schema.makeFilter((s: string) => s.length >= 1 && s.length <= 200 ? undefined : "must be 1-200 characters")
  )
    .pipe(Schema.withDecodingDefault(Effect.succeed("tidings")))
})

/**
 * The connection service.
 * @since 0.1.0
 * @category models
 */
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
  /** Completes at once when connected and not blocked, else when that is so again (never fails; interrupt it to stop waiting). */
  readonly awaitAvailable: Effect.Effect<void>
  /** Adds a topology to the one declared on every reconnect, and declares it now if connected. */
  readonly declare: (topology: Topology.Topology) => Effect.Effect<void, TopologyError | AmqpConnectionError>
  /**
   * Registers a channel owner for as long as the scope lives. When connected, waits for its first
   * `open` and fails with a non-retryable error of it (a refused topology); otherwise (or when the
   * first open can be retried) it opens on the next connect.
   */
  readonly register: (owner: ChannelOwner) => Effect.Effect<void, AmqpConnectionError | TopologyError, Scope.Scope>
  /** Closes the current connection from this side; it reconnects per the schedule (for tests and credential rotation). */
  readonly restart: Effect.Effect<void>
  /** Removes credentials (URL userinfo, password fields) from a text (for owners that format broker errors). */
  readonly scrub: (text: string) => string
}

const AmqpConnectionBase: Context.ServiceClass<AmqpConnection, "@tidings/rabbitmq/AmqpConnection", Service> = Context
  .Service<AmqpConnection, Service>()("@tidings/rabbitmq/AmqpConnection")

/**
 * The connection of a layer.
 * @since 0.1.0
 * @category services
 */
export class AmqpConnection extends AmqpConnectionBase {}

/**
 * The default reconnect schedule: 1 s doubling to a 30 s cap, jittered, forever.
 * @since 0.1.0
 * @category constructors
 */
export const defaultReconnect: Schedule.Schedule<unknown, AmqpConnectionError> = Retry.exponentialBackoff({
  base: "1 second",
  max: "30 seconds"
})

const defaultChannelRetry: Schedule.Schedule<unknown, AmqpConnectionError | TopologyError> = Retry.exponentialBackoff({
  base: "100 millis",
  max: "5 seconds"
})

/**
 * Builds the service; the connection closes when the scope does.
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  config: Config
): Effect.Effect<Service, InvalidConfig | AmqpConnectionError | TopologyError, Scope.Scope> =>
  Effect.gen(function*() {
    const s = yield* Settings.decode(ConfigSchema, config)
    const resolved = yield* resolveUrl(config.url, Math.ceil(Duration.toMillis(s.heartbeat) / 1000))
    const { description } = resolved
    const topologies: Array<Topology.Topology> = config.topology === undefined ? [] : [config.topology]
    const c = yield* makeCore({
      url: resolved.url,
      name: s.name,
      description,
      connectTimeout: s.connectTimeout,
      closeTimeout: s.closeTimeout,
      reconnect: config.reconnect ?? Retry.exponentialBackoff({ base: s.reconnectDelay, max: s.reconnectMaxDelay }),
      topologies
    })
    const { core } = c

    // First connection: part of building the layer, so that a wrong password or host shows at once.
    const started = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    const startupMs = Duration.toMillis(s.startupTimeout)
    const lastError = () => "lastError" in core.state ? core.state.lastError : undefined
    const notConnected = () =>
      Effect.fail(
        lastError() ??
          new AmqpConnectionError({
            operation: "connect",
            message: `not connected within ${Duration.format(s.startupTimeout)}`,
            retryable: true
          })
      )
    const first = yield* c.connectWithRetry(undefined, started + startupMs).pipe(
      // The last attempt is made at the deadline; it may take a moment (at most a second) to answer.
      // One that reached the broker in time is not cut off: its declaration (and, if the broker
      // closed the connection under it, its one reconnect) finishes.
      startupMs === 0 ? (effect) => effect : (effect) =>
        Effect.raceFirst(
          effect,
          Effect.sleep(Duration.sum(s.startupTimeout, Duration.min(s.connectTimeout, Duration.seconds(1)))).pipe(
            Effect.andThen(Effect.suspend(() => core.reachedInTime ? Effect.never : notConnected()))
          )
        ),
      Effect.tapError((error) =>
        Effect.sync(() =>
          c.setState({ _tag: "Closed", ...(error._tag === "AmqpConnectionError" ? { lastError: error } : {}) })
        )
      )
    )
    yield* Effect.logDebug("RabbitMQ connected").pipe(core.annotate)
    const supervisor = yield* Effect.forkScoped(c.supervise(first))

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        core.closing = true
        yield* Fiber.interrupt(supervisor)
        core.current = undefined
        yield* Effect.forEach([...core.openModels], (model) => closeConnection(model, s.closeTimeout), {
          concurrency: "unbounded",
          discard: true
        })
        Deferred.doneUnsafe(core.shutdown, Effect.void)
        c.setState({ _tag: "Closed" })
      })
    )

    const changes = Stream.unwrap(Effect.map(PubSub.subscribe(core.hub), (subscription) =>
      Stream.concat(
        Stream.sync(() => core.state),
        Stream.fromSubscription(subscription)
      )))
    const service: Service = {
      description,
      state: Effect.sync(() => core.state),
      changes,
      isReady: Effect.sync(c.readyNow),
      awaitReady: (timeout) =>
        Effect.suspend(() => c.readyNow() ? Effect.void : Effect.asVoid(c.awaitLive)).pipe(
          Effect.timeoutOrElse({
            duration: timeout,
            orElse: () =>
              Effect.fail(
                "lastError" in core.state && core.state.lastError !== undefined
                  ? core.state.lastError
                  : new AmqpConnectionError({
                    operation: "awaitReady",
                    message: `not connected within ${Duration.format(Duration.fromInputUnsafe(timeout))}`,
                    retryable: true
                  })
              )
          })
        ),
      awaitAvailable: Effect.suspend(() =>
        c.readyNow()
          ? Effect.void
          : changes.pipe(Stream.filter(() => c.readyNow() || core.closing), Stream.take(1), Stream.runDrain)
      ),
      declare: (topology) =>
        Effect.suspend(() => {
          topologies.push(topology)
          return core.current === undefined ? Effect.void : c.declareOn(core.current, topology)
        }),
      register: makeRegister(c, {
        channelRetry: config.channelRetry ?? defaultChannelRetry,
        closeTimeout: s.closeTimeout
      }),
      restart: Effect.suspend(() =>
        core.current === undefined ? Effect.void : closeConnection(core.current.model, s.closeTimeout)
      ),
      scrub
    }
    return service
  }).pipe(Effect.annotateLogs({ component: "AmqpConnection" }))

/**
 * Provides the {@link AmqpConnection}. Building it connects (retrying a refused connection for up to
 * `startupTimeout`) and declares `topology`; releasing it closes the connection after the owners
 * registered on it (publishers, consumers) have shut down.
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  config: Config
): Layer.Layer<AmqpConnection, InvalidConfig | AmqpConnectionError | TopologyError> =>
  Layer.effect(AmqpConnection, make(config))

const describeState = (state: State): string => {
  switch (state._tag) {
    case "Connected":
      return state.blocked ? "the broker blocked the connection (resource alarm)" : "the connection is being set up"
    case "Connecting":
      return `connecting (attempt ${state.attempt})${
        state.lastError === undefined ? "" : `: ${state.lastError.message}`
      }`
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
 * @since 0.1.0
 * @category health
 */
export const readiness = (name = "rabbitmq"): Health.Check<AmqpConnection> => ({
  name,
  run: AmqpConnection.use((connection) =>
    Effect.flatMap(connection.isReady, (ready) =>
      ready
        ? Effect.void
        : Effect.flatMap(
          connection.state,
          (state) => Effect.fail(new Health.CheckFailed({ check: name, message: describeState(state) }))
        ))
  )
})

/**
 * The connection's environment variables: `TIDINGS_AMQP_URL` (a secret), `TIDINGS_AMQP_HEARTBEAT`,
 * `TIDINGS_AMQP_RECONNECT_DELAY`, ... (see {@link ConfigSchema}).
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = {
  component: "AmqpConnection",
  schema: ConfigSchema,
  prefix: "TIDINGS_AMQP"
}

/**
 * {@link layer} with its settings from the environment (`TIDINGS_AMQP_*`, or `options.prefix`) on
 * top of `options.defaults`, which also carry what has no variable (`topology`, `reconnect`); a
 * wrong variable fails with one `InvalidConfig` naming every wrong variable.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Settings.EnvironmentOptions<Partial<Config>> = {}
): Layer.Layer<AmqpConnection, InvalidConfig | AmqpConnectionError | TopologyError> =>
  Layer.unwrap(Effect.map(Settings.read(environment, options), (s) => layer({ ...options.defaults, ...s })))
