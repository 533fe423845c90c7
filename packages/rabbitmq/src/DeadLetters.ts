/**
 * The dead-letter queues of consumer queues (`<queue>.dlq`, see `Topology.consumerQueue`), for
 * operators: list them with their message counts, look at their first messages, and replay
 * messages back into their work queue. The console of `@tidings/hono` takes it as its
 * `deadLetterQueues` port; the `tidings dlq` commands use it too.
 *
 * A replay moves one message at a time: the copy is published to the work queue (through the
 * default exchange, so other queues bound to the events exchange do not get it again) on a confirm
 * channel, and only once the broker confirmed it is the dead-lettered message acked. A crash in
 * between leaves both (at least once: the inbox makes the effect happen once). The copy keeps the
 * message's properties and headers, without the broker's death bookkeeping and the consumer's
 * attempt count, so the consumer gives it a fresh budget of attempts; `tidings-replayed` counts
 * replays.
 * @module
 */
import { InvalidConfig } from "@tidings/core/Errors"
import type { Channel, ConfirmChannel, GetMessage } from "amqplib"
import { type Cause, Context, Effect, Layer, Schema, type Scope, Semaphore } from "effect"
import { Buffer } from "node:buffer"
import { AmqpConnection } from "./AmqpConnection.ts"
import { AmqpConnectionError, type TopologyError } from "./AmqpErrors.ts"
import { brokerHeaders, copiedProperties, HeaderNames } from "./internal/headers.ts"
import type * as Topology from "./Topology.ts"

/**
 * Settings of {@link make}.
 * @since 0.1.0
 * @category options
 */
export interface Config {
  /** The work queues whose dead-letter queues are managed: names, or `Topology.consumerQueue` results. */
  readonly queues: ReadonlyArray<string | Topology.ConsumerQueue>
  /** How long a replayed copy may wait for the broker's confirm (default 10 s). */
  readonly confirmTimeoutMs?: number
}

/**
 * A dead-letter queue and the work queue it replays into.
 * @since 0.1.0
 * @category models
 */
export interface DeadLetterQueue {
  readonly name: string
  readonly target: string
  readonly messages: number
  /** Consumers of the work queue. */
  readonly consumers: number
}

/**
 * A dead-lettered message, as a peek shows it.
 * @since 0.1.0
 * @category models
 */
export interface DeadLetterMessage {
  readonly messageId: string | null
  readonly type: string | null
  /** Why and where it died, from the broker's `x-death` / `x-first-death-*` headers. */
  readonly reason: string | null
  readonly headers: Readonly<Record<string, unknown>>
  /** The body as UTF-8 text, cut at 4 KiB. */
  readonly body: string
}

const DeadLetterQueueNotFoundBase: Schema.Class<
  DeadLetterQueueNotFound,
  Schema.TaggedStruct<"DeadLetterQueueNotFound", {
    readonly queue: Schema.String
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<DeadLetterQueueNotFound>()("DeadLetterQueueNotFound", {
  queue: Schema.String,
  message: Schema.String
})

/**
 * A queue that is not one of the configured dead-letter queues (nor their work queues).
 * @since 0.1.0
 * @category errors
 */
export class DeadLetterQueueNotFound extends DeadLetterQueueNotFoundBase {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * Options of {@link Service.replay}.
 * @since 0.1.0
 * @category options
 */
export interface ReplayOptions {
  /** At most this many messages (default: all that are there when it starts). */
  readonly limit?: number
  /** Called after each message with how many were replayed and how many there were to replay. */
  readonly onProgress?: (done: number, total: number) => Effect.Effect<void>
}

/**
 * The dead-letter queues service.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  readonly list: Effect.Effect<ReadonlyArray<DeadLetterQueue>, AmqpConnectionError>
  /**
   * The first `limit` messages of a dead-letter queue, left in it: taken and requeued at once, so
   * quorum queues count a delivery and put them behind the others.
   */
  readonly peek: (
    queue: string,
    limit: number
  ) => Effect.Effect<ReadonlyArray<DeadLetterMessage>, AmqpConnectionError | DeadLetterQueueNotFound>
  /** Moves messages back into the work queue (see the module docs); returns how many. */
  readonly replay: (
    queue: string,
    options?: ReplayOptions
  ) => Effect.Effect<number, AmqpConnectionError | DeadLetterQueueNotFound>
}

const DeadLettersBase: Context.ServiceClass<DeadLetters, "@tidings/rabbitmq/DeadLetters", Service> = Context.Service<
  DeadLetters,
  Service
>()("@tidings/rabbitmq/DeadLetters")

/**
 * The service of {@link layer}.
 * @since 0.1.0
 * @category services
 */
export class DeadLetters extends DeadLettersBase {}

/**
 * The header counting replays of a message.
 * @since 0.1.0
 * @category constants
 */
export const replayedHeader = "tidings-replayed"

// The broker's death bookkeeping and the consumer's attempt count (AmqpPublisher.HeaderNames.attempt)
// stay behind: the replayed copy starts afresh.
const dropped = new Set([...brokerHeaders, HeaderNames.attempt])

const text = (value: unknown): string | null =>
  typeof value === "string" ? value : Buffer.isBuffer(value) ? value.toString("utf8") : null

const reasonOf = (headers: Record<string, unknown>): string | null => {
  const deaths = headers["x-death"]
  if (Array.isArray(deaths) && deaths.length > 0) {
    const last = deaths[0] as Record<string, unknown>
    const count = typeof last["count"] === "number" ? ` ×${last["count"]}` : ""
    return `${text(last["reason"]) ?? "dead-lettered"} from ${text(last["queue"]) ?? "?"}${count}`
  }
  const reason = text(headers["x-first-death-reason"])
  return reason === null ? null : `${reason} from ${text(headers["x-first-death-queue"]) ?? "?"}`
}

// Headers as JSON-friendly values (amqplib gives Buffers for byte strings).
const plain = (value: unknown): unknown =>
  Buffer.isBuffer(value) ? value.toString("utf8") : Array.isArray(value) ? value.map(plain) : value instanceof Date ?
    value.toISOString()
    : typeof value === "object" && value !== null
    ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]))
    : value

const notConnected = (operation: string) =>
  new AmqpConnectionError({ operation, message: "not connected to RabbitMQ", retryable: true })

const failure = (operation: string, scrub: (s: string) => string) => (error: unknown) => {
  const e = error as { readonly message?: unknown; readonly code?: unknown }
  return new AmqpConnectionError({
    operation,
    message: scrub(typeof e?.message === "string" ? e.message : String(error)),
    retryable: true,
    ...(typeof e?.code === "number" || typeof e?.code === "string" ? { code: e.code } : {})
  })
}

/**
 * Builds the service on the app's `AmqpConnection`; its channels are re-opened after every reconnect.
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  config: Config
): Effect.Effect<Service, InvalidConfig | AmqpConnectionError | TopologyError, AmqpConnection | Scope.Scope> =>
  Effect.gen(function*() {
    const connection = yield* AmqpConnection
    const targets = new Map<string, string>()
    for (const q of config.queues) {
      const name = typeof q === "string" ? q : q.queue
      const dlq = typeof q === "string" ? `${q}.dlq` : q.deadLetterQueue
      if (name.length === 0 || name.length > 200) {
        return yield* new InvalidConfig({ path: "queues", message: "queue names must be 1-200 characters" })
      }
      targets.set(dlq, name)
    }
    const timeout = config.confirmTimeoutMs ?? 10_000
    if (!Number.isInteger(timeout) || timeout < 1) {
      return yield* new InvalidConfig({ path: "confirmTimeoutMs", message: "must be a positive integer" })
    }

    let channels: { readonly channel: Channel; readonly confirm: ConfirmChannel } | undefined
    yield* connection.register({
      name: "dead-letters",
      open: (c) =>
        Effect.gen(function*() {
          channels = { channel: yield* c.channel, confirm: yield* c.confirmChannel }
        }),
      onClose: () => Effect.sync(() => void (channels = undefined))
    })
    // One operation at a time: a peek's requeue must not interleave with a replay's gets.
    const lock = yield* Semaphore.make(1)
    const using = <A>(operation: string, f: (c: NonNullable<typeof channels>) => Promise<A>) =>
      lock.withPermits(1)(Effect.suspend(() =>
        channels === undefined
          ? Effect.fail(notConnected(operation))
          : Effect.tryPromise({ try: () => f(channels!), catch: failure(operation, connection.scrub) })
      ))

    const resolve = (queue: string) => {
      if (targets.has(queue)) return Effect.succeed({ dlq: queue, target: targets.get(queue)! })
      for (const [dlq, target] of targets) if (target === queue) return Effect.succeed({ dlq, target })
      return Effect.fail(
        new DeadLetterQueueNotFound({
          queue,
          message: `${queue} is not a configured dead-letter queue (known: ${[...targets.keys()].join(", ") || "none"})`
        })
      )
    }

    const publishCopy = (confirm: ConfirmChannel, target: string, message: GetMessage) =>
      new Promise<void>((done, fail) => {
        const { properties } = message
        const headers: Record<string, unknown> = {}
        for (const [k, v] of Object.entries(properties.headers ?? {})) if (!dropped.has(k)) headers[k] = v
        headers[replayedHeader] = (typeof properties.headers?.[replayedHeader] === "number"
          ? properties.headers[replayedHeader] as number
          : 0) + 1
        const timer = setTimeout(() => fail(new Error(`no confirm within ${timeout} ms`)), timeout)
        confirm.publish("", target, message.content, {
          persistent: true,
          mandatory: false,
          headers,
          ...(properties.messageId == null ? {} : { messageId: String(properties.messageId) }),
          ...copiedProperties(properties)
        }, (error: unknown) => {
          clearTimeout(timer)
          if (error === null || error === undefined) done()
          else fail(error instanceof Error ? error : new Error(`the broker refused the copy (nack)`))
        })
      })

    return DeadLetters.of({
      list: Effect.forEach([...targets], ([dlq, target]) =>
        using("checkQueue", async ({ channel }) => {
          const dead = await channel.checkQueue(dlq)
          const work = await channel.checkQueue(target)
          return { name: dlq, target, messages: dead.messageCount, consumers: work.consumerCount }
        })),

      peek: (queue, limit) =>
        Effect.flatMap(resolve(queue), ({ dlq }) =>
          using("peek", async ({ channel }) => {
            const taken: Array<GetMessage> = []
            try {
              while (taken.length < Math.max(0, limit)) {
                const message = await channel.get(dlq, { noAck: false })
                if (message === false) break
                taken.push(message)
              }
            } finally {
              // Back where they were, in one nack of all taken so far.
              if (taken.length > 0) channel.nack(taken.at(-1)!, true, true)
            }
            return taken.map((m): DeadLetterMessage => {
              const headers = m.properties.headers ?? {}
              return {
                messageId: m.properties.messageId == null ? null : String(m.properties.messageId),
                type: m.properties.type == null ? null : String(m.properties.type),
                reason: reasonOf(headers),
                headers: plain(headers) as Record<string, unknown>,
                body: m.content.subarray(0, 4096).toString("utf8")
              }
            })
          })),

      replay: (queue, options = {}) =>
        Effect.gen(function*() {
          const { dlq, target } = yield* resolve(queue)
          // The count is for progress only: messages a peek just gave back may not be counted as
          // ready yet (quorum queues), so the loop runs until the queue is empty or the limit is hit.
          const waiting = yield* using(
            "checkQueue",
            ({ channel }) => channel.checkQueue(dlq).then((q) => q.messageCount)
          )
          const limit = options.limit ?? Number.POSITIVE_INFINITY
          const report = options.onProgress ?? (() => Effect.void)
          yield* report(0, Math.min(waiting, limit))
          let done = 0
          while (done < limit) {
            const moved = yield* using("replay", async ({ channel, confirm }) => {
              const message = await channel.get(dlq, { noAck: false })
              if (message === false) return false
              try {
                await publishCopy(confirm, target, message)
              } catch (error) {
                channel.nack(message, false, true)
                throw error
              }
              channel.ack(message)
              return true
            })
            if (!moved) break
            done++
            yield* report(done, Math.min(Math.max(waiting, done), limit))
          }
          return done
        })
    })
  })

/**
 * {@link make} as a layer over the app's `AmqpConnection`.
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  config: Config
): Layer.Layer<DeadLetters, InvalidConfig | AmqpConnectionError | TopologyError, AmqpConnection> =>
  Layer.effect(DeadLetters, make(config))
