/**
 * The relay's `Publisher` for webhooks: each event is POSTed to the endpoints subscribed to its type,
 * signed per the Standard Webhooks convention (see {@link WebhookSignature}). `fetch` and WebCrypto
 * only, so it runs wherever the relay runs: Node, Deno, Bun, Cloudflare Workers.
 *
 * How an answer settles the event (through the relay's retry schedule and `maxAttempts`):
 *
 * | answer | event |
 * |---|---|
 * | 2xx | published |
 * | 408, 429, 5xx | retried; a `Retry-After` header delays the retry at least that long |
 * | timeout, connection refused or reset, DNS failure | retried (the receiver is unreachable, not the event bad) |
 * | other 3xx / 4xx | failed for good, with the status and the start of the response body as its error |
 *
 * An event that matches several endpoints is published once every one of them answered 2xx; a retry
 * goes to all of them again (receivers deduplicate by `webhook-id`, e.g. with `WebhookReceiver`).
 * @module
 */
import * as Errors from "@tidings/core/Errors"
import { InvalidConfig, PublishError } from "@tidings/core/Errors"
import { matches } from "@tidings/core/MemoryBroker"
import { type Message, payloadJson } from "@tidings/core/Message"
import * as Publisher from "@tidings/core/Publisher"
import * as Tracing from "@tidings/core/Tracing"
import { Config as EffectConfig, type Context, Duration, Effect, Layer, Metric, type Redacted } from "effect"
import * as Delivery from "./internal/delivery.ts"
import { Limiter } from "./internal/limiter.ts"
import * as WebhookSignature from "./WebhookSignature.ts"

/**
 * One receiving endpoint.
 * @since 0.1.0
 * @category models
 */
export interface Endpoint {
  /** Where events are POSTed (`http:` or `https:`). */
  readonly url: string
  /** Event-type patterns this endpoint receives: `order.placed`, `order.*` (one word), `#` (any; the default). */
  readonly types?: ReadonlyArray<string>
  /**
   * The shared secret (`whsec_…`), or several during a rotation: every request then carries one
   * signature per secret, so that the receiver may check either.
   */
  readonly secret: WebhookSignature.SecretInput | ReadonlyArray<WebhookSignature.SecretInput>
  /** Names the endpoint in errors and metrics (default: its host and path). */
  readonly name?: string
  /** Requests in flight to this endpoint at most (default 10). */
  readonly concurrency?: number
  /** A request (connect, send, answer, body) that takes longer is abandoned and retried (default 10 s). */
  readonly timeout?: Duration.Input
  /** Extra request headers (e.g. an API key the receiver's gateway wants). */
  readonly headers?: Readonly<Record<string, string>>
}

/**
 * Settings of {@link make} / {@link layer}.
 * @since 0.1.0
 * @category models
 */
export interface Config {
  readonly endpoints: ReadonlyArray<Endpoint>
  /**
   * An event whose type no endpoint subscribes to: `fail` (the default: it is failed, visible with
   * the outbox's failed events, and can be retried once an endpoint is added) or `skip` (settled as
   * published without a request, as a broker drops a message no queue is bound to).
   */
  readonly unmatched?: "fail" | "skip"
  /** The longest `Retry-After` honoured (default 1 hour): a receiver cannot park events longer. */
  readonly maxRetryAfter?: Duration.Input
  /** Bytes of an error response kept in the event's error (default 512). */
  readonly errorBodyBytes?: number
  /** The request body of an event (default: {@link defaultBody}). */
  readonly body?: (message: Message) => string
  /** The fetch to use (default `globalThis.fetch`), e.g. a Workers service binding's. */
  readonly fetch?: (url: string, init: RequestInit) => Promise<Response>
  /** `user-agent` of the requests (default `tidings-webhooks`). */
  readonly userAgent?: string
}

/**
 * The default request body: the Standard Webhooks payload shape (`type`, `timestamp`, `data`) with
 * the event's id, version and aggregate. `data` is the event's payload, sent as the JSON text the
 * outbox stored.
 * @since 0.1.0
 * @category combinators
 */
export const defaultBody = (message: Message): string =>
  `{"id":${JSON.stringify(message.id)},"type":${JSON.stringify(message.type)},"version":${message.version},` +
  `"timestamp":${JSON.stringify(message.occurredAt.toISOString())},"aggregateType":${
    JSON.stringify(message.aggregateType)
  },` +
  `"aggregateId":${JSON.stringify(message.aggregateId)},"data":${payloadJson(message) ?? "null"}}`

/**
 * Webhook requests by `endpoint` and `outcome` (`delivered`, `retry`, `failed`).
 * @since 0.1.0
 * @category metrics
 */
export const deliveries: Metric.Counter<number> = Metric.counter("tidings_webhook_deliveries_total", {
  description: "Webhook requests by endpoint and outcome",
  incremental: true
})

/**
 * Seconds from sending a webhook request to its answer, by `endpoint`.
 * @since 0.1.0
 * @category metrics
 */
export const duration: Metric.Histogram<number> = Metric.histogram("tidings_webhook_request_duration_seconds", {
  description: "Webhook request round trips",
  boundaries: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
})

const invalid = (path: string, message: string) => new InvalidConfig({ path, message })

const endpointName = (url: URL) => `${url.host}${url.pathname === "/" ? "" : url.pathname}`

/** A validated endpoint with its keys and its metrics. */
interface Endpointed extends Delivery.Target {
  readonly counters: {
    readonly delivered: Metric.Metric<number, unknown>
    readonly retry: Metric.Metric<number, unknown>
    readonly failed: Metric.Metric<number, unknown>
  }
  readonly duration: Metric.Metric<number, unknown>
}

const target = (endpoint: Endpoint, i: number): Effect.Effect<Endpointed, InvalidConfig> =>
  Effect.gen(function*() {
    const path = `endpoints[${i}]`
    let url: URL
    try {
      url = new URL(endpoint.url)
    } catch {
      return yield* invalid(`${path}.url`, "must be an absolute http: or https: URL")
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      return yield* invalid(`${path}.url`, "must be an http: or https: URL")
    }
    const patterns = endpoint.types ?? ["#"]
    if (
      patterns.length === 0 || patterns.some((p) => typeof p !== "string" || p === "")
    ) {
      return yield* invalid(`${path}.types`, "must be a non-empty list of event-type patterns")
    }
    const concurrency = endpoint.concurrency ?? 10
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 1000) {
      return yield* invalid(
        `${path}.concurrency`,
        `must be an integer from 1 to 1000, got ${String(endpoint.concurrency)}`
      )
    }
    const timeout = Duration.fromInput(endpoint.timeout ?? "10 seconds")
    if (timeout._tag === "None" || !Duration.isFinite(timeout.value) || Duration.toMillis(timeout.value) <= 0) {
      return yield* invalid(`${path}.timeout`, `must be a finite positive duration, got ${String(endpoint.timeout)}`)
    }
    const secrets: ReadonlyArray<WebhookSignature.SecretInput> = Array.isArray(endpoint.secret)
      ? endpoint.secret
      : [endpoint.secret as string | Redacted.Redacted<string>]
    if (secrets.length === 0) return yield* invalid(`${path}.secret`, "needs at least one secret")
    const keys = yield* Effect.forEach(secrets, (s) => WebhookSignature.key(s)).pipe(
      Effect.mapError((e) => invalid(`${path}.secret`, e.message))
    )
    const name = endpoint.name ?? endpointName(url)
    const counter = (outcome: string) => Metric.withAttributes(deliveries, { endpoint: name, outcome })
    return {
      name,
      url: url.href,
      patterns,
      keys: keys.map((k) => k.cryptoKey),
      timeout: timeout.value,
      timeoutMs: Duration.toMillis(timeout.value),
      limiter: new Limiter(concurrency),
      headers: endpoint.headers ?? {},
      counters: { delivered: counter("delivered"), retry: counter("retry"), failed: counter("failed") },
      duration: Metric.withAttributes(duration, { endpoint: name })
    }
  })

/**
 * Whether a status is worth another attempt: 408 (request timeout), 429 (too many requests), 5xx.
 * @since 0.1.0
 * @category predicates
 */
export const isRetryableStatus = Delivery.isRetryableStatus

type Failure = Extract<Delivery.Outcome, { ok: false }>

/** An event's result from its endpoints' outcomes. */
const resultOf = (message: Message, outcomes: ReadonlyArray<Delivery.Outcome>): Publisher.PublishResult => {
  const failures = outcomes.filter((o): o is Failure => !o.ok)
  if (failures.length === 0) return Publisher.published(message.id)
  // One endpoint that refuses for good fails the event: retrying cannot change its answer. An
  // unreachable receiver is a retryable failure of this delivery, not unavailability of the
  // publisher: Unavailable would pause the whole relay (every endpoint, every event) for one
  // receiver that is down, so it counts attempts like a 503, as the README says.
  const retryable = failures.every((f) => f.retryable)
  const waits = failures.flatMap((f) => f.retryAfter === undefined ? [] : [f.retryAfter])
  const text = failures.map((f) => f.reason).join("; ")
  const status = failures.find((f) => f.status !== undefined && !f.retryable)?.status ??
    failures.find((f) => f.status !== undefined)?.status
  const reason: Errors.PublishErrorReason = !retryable
    ? new Errors.Refused({ retryable: false, ...(status === undefined ? {} : { status }) })
    : failures.every((f) => f.kind === "timeout")
    ? new Errors.Timeout()
    : new Errors.Refused({
      retryable: true,
      ...(status === undefined ? {} : { status }),
      ...(waits.length === 0 ? {} : { retryAfterMs: Duration.toMillis(waits.reduce(Duration.max)) })
    })
  return Publisher.rejected(message.id, new PublishError({ message: text, reason }))
}

/**
 * Builds the publisher: validates the endpoints and imports their keys.
 * @since 0.1.0
 * @category constructors
 */
export const make = (config: Config): Effect.Effect<Publisher.Service, InvalidConfig> =>
  Effect.gen(function*() {
    if (!Array.isArray(config.endpoints) || config.endpoints.length === 0) {
      return yield* invalid("endpoints", "needs at least one endpoint")
    }
    const targets = yield* Effect.forEach(config.endpoints, target)
    const unmatched = config.unmatched ?? "fail"
    if (unmatched !== "fail" && unmatched !== "skip") {
      return yield* invalid("unmatched", `must be "fail" or "skip", got ${JSON.stringify(unmatched)}`)
    }
    const maxRetryAfter = Duration.fromInput(config.maxRetryAfter ?? "1 hour")
    if (maxRetryAfter._tag === "None" || !Duration.isFinite(maxRetryAfter.value)) {
      return yield* invalid("maxRetryAfter", "must be a finite duration")
    }
    const errorBodyBytes = config.errorBodyBytes ?? 512
    if (!Number.isInteger(errorBodyBytes) || errorBodyBytes < 0 || errorBodyBytes > 65_536) {
      return yield* invalid("errorBodyBytes", "must be an integer from 0 to 65536")
    }
    const render = config.body ?? defaultBody
    const shared: Delivery.Shared = {
      send: config.fetch ?? ((url, init) => globalThis.fetch(url, init)),
      userAgent: config.userAgent ?? "tidings-webhooks",
      errorBodyBytes,
      maxRetryAfter: maxRetryAfter.value
    }
    // Matches by type, memoised: a relay sees few distinct types.
    const byType = new Map<string, ReadonlyArray<Endpointed>>()
    const targetsOf = (type: string) => {
      let found = byType.get(type)
      if (found === undefined) {
        found = targets.filter((t) => t.patterns.some((p) => matches(p, type)))
        if (byType.size < 10_000) byType.set(type, found)
      }
      return found
    }
    const noEndpoint = (message: Message) =>
      unmatched === "skip"
        ? Publisher.published(message.id)
        : Publisher.rejected(
          message.id,
          new PublishError({
            message: `no webhook endpoint subscribes to ${message.type}`,
            reason: new Errors.Refused({ retryable: false })
          })
        )

    const publishAll = (messages: ReadonlyArray<Message>, batch: AbortSignal, context: Context.Context<never>) =>
      Promise.all(messages.map(async (message): Promise<Publisher.PublishResult> => {
        const matched = targetsOf(message.type)
        if (matched.length === 0) return noEndpoint(message)
        const body = render(message)
        const outcomes = await Promise.all(matched.map((t) =>
          Delivery.deliver(t, shared, message, body, batch, (outcome, seconds) => {
            t.duration.updateUnsafe(seconds, context)
            ;(outcome.ok ? t.counters.delivered : outcome.retryable ? t.counters.retry : t.counters.failed)
              .updateUnsafe(1, context)
          })
        ))
        return resultOf(message, outcomes)
      }))

    // One endpoint: its name and host on the spans; several: the system alone.
    const only = targets.length === 1 ? targets[0]! : undefined
    const destination: Tracing.Destination = only === undefined
      ? { system: "webhooks" }
      : { system: "webhooks", name: only.name, ...Tracing.serverOf(only.url, only.url.startsWith("https:") ? 443 : 80) }
    return Publisher.Publisher.of({
      destination,
      // Interrupting the publish (the relay's publish timeout, shutdown) aborts its requests.
      publish: (messages) =>
        Effect.flatMap(Effect.context<never>(), (context) =>
          Effect.callback<ReadonlyArray<Publisher.PublishResult>>((resume) => {
            const batch = new AbortController()
            publishAll(messages, batch.signal, context).then(
              (results) =>
                resume(Effect.succeed(results)),
              (error) =>
                resume(Effect.die(error))
            )
            return Effect.sync(() =>
              batch.abort()
            )
          }))
    })
  })

/**
 * The publisher as the relay's `Publisher` layer.
 * @since 0.1.0
 * @category layers
 */
export const layer = (config: Config): Layer.Layer<Publisher.Publisher, InvalidConfig> =>
  Layer.effect(Publisher.Publisher, make(config))

/**
 * One endpoint from configuration: `<prefix>_URL`, `<prefix>_SECRET` (redacted), optional
 * `<prefix>_TYPES` (comma-separated patterns) and `<prefix>_CONCURRENCY`; e.g. with the default
 * prefix `WEBHOOK`: `WEBHOOK_URL`, `WEBHOOK_SECRET`.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  prefix = "WEBHOOK",
  options: Omit<Config, "endpoints"> = {}
): Layer.Layer<Publisher.Publisher, InvalidConfig | EffectConfig.ConfigError> =>
  Layer.unwrap(Effect.gen(function*() {
    const url = yield* EffectConfig.String(`${prefix}_URL`)
    const secret = yield* EffectConfig.Redacted(`${prefix}_SECRET`)
    const types = yield* EffectConfig.String(`${prefix}_TYPES`).pipe(EffectConfig.withDefault("#"))
    const concurrency = yield* EffectConfig.Int(`${prefix}_CONCURRENCY`).pipe(EffectConfig.withDefault(10))
    return layer({
      ...options,
      endpoints: [{ url, secret, concurrency, types: types.split(",").map((t) => t.trim()).filter((t) => t !== "") }]
    })
  }))
