/**
 * Receiving webhooks signed per the Standard Webhooks convention (from {@link WebhookPublisher} or
 * any other sender): verify the signature and the timestamp, then run the handler through the inbox
 * keyed by `webhook-id`, so that its effects happen once however often the sender retries.
 *
 * {@link handle} works on a web `Request` (any fetch-style server); {@link hono} makes a Hono
 * handler of it. The answers tell a sender what to do next:
 *
 * | case | status | the sender |
 * |---|---|---|
 * | handled, or handled before (duplicate) | 204 | settles |
 * | missing headers, stale or future timestamp, body not JSON | 400 | fails the event |
 * | no valid signature | 401 | fails the event |
 * | body over `maxBodyBytes` | 413 | fails the event |
 * | the handler failed with a permanent error (`isRetryable` false), or a crash loop | 422 | fails the event |
 * | the handler failed with a retryable error, the database is down | 503 | retries later |
 * | a defect | 500 | retries later |
 * @module
 */
import { isRetryable } from "@tidings/core/Errors"
import * as Inbox from "@tidings/core/Inbox"
import type { InboxStore } from "@tidings/core/InboxStore"
import type { OutboxStore } from "@tidings/core/OutboxStore"
import { Cause, Clock, Duration, Effect, Exit, Option, Schema } from "effect"
import { readBounded } from "./internal/http.ts"
import * as WebhookSignature from "./WebhookSignature.ts"

/**
 * Settings of {@link make}.
 * @since 0.1.0
 * @category options
 */
export interface Options {
  /** The shared secret (`whsec_…`), or several during a rotation (a request signed with any of them passes). */
  readonly secret: WebhookSignature.SecretInput | ReadonlyArray<WebhookSignature.SecretInput>
  /** The inbox consumer name: one receiver's deduplication is separate from another's. */
  readonly consumer: string
  /** How far `webhook-timestamp` may be from now, either way (default 5 minutes): older requests are replays. */
  readonly tolerance?: Duration.Input
  /** Largest body accepted (default 1 MiB). */
  readonly maxBodyBytes?: number
  /** Inbox options (`maxCrashes`). */
  readonly inbox?: Inbox.Options
}

/**
 * A verified webhook.
 * @since 0.1.0
 * @category models
 */
export interface Webhook {
  /** `webhook-id`: the event id; the inbox key. */
  readonly id: string
  /** `webhook-timestamp` of this attempt. */
  readonly timestamp: Date
  /** The body as sent (what the signature covers). */
  readonly body: string
  /** The body parsed as JSON. */
  readonly json: unknown
  /** `json.type` when it is a string (the Standard Webhooks payload shape), else undefined. */
  readonly type: string | undefined
  /** `json.data` (the Standard Webhooks payload shape; the event's payload for Tidings' default body). */
  readonly data: unknown
  readonly headers: Headers
}

const WebhookRejectedBase: Schema.Class<
  WebhookRejected,
  Schema.TaggedStruct<"WebhookRejected", {
    readonly status: Schema.Int
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<WebhookRejected>()("WebhookRejected", {
  status: Schema.Int,
  message: Schema.String
})

/**
 * Why a request was refused before its handler ran.
 * @since 0.1.0
 * @category errors
 */
export class WebhookRejected extends WebhookRejectedBase {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * A receiver with its keys imported.
 * @since 0.1.0
 * @category models
 */
export interface Receiver {
  readonly consumer: string
  /** Reads and verifies a request; the handler is not involved. */
  readonly verify: (request: Request) => Effect.Effect<Webhook, WebhookRejected>
  /** Verifies, then runs `handler` once per `webhook-id` (see the module docs for the answers). */
  readonly handle: <E, R>(
    request: Request,
    handler: (webhook: Webhook) => Effect.Effect<void, E, R>
  ) => Effect.Effect<Response, never, R | InboxStore | OutboxStore>
}

const reject = (status: number, message: string) => new WebhookRejected({ status, message })

const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } })

const errorTag = (error: unknown): string =>
  typeof error === "object" && error !== null && "_tag" in error
    ? String((error as { _tag: unknown })._tag)
    : error instanceof Error
    ? error.name
    : "Error"

const errorMessage = (error: unknown): string =>
  (typeof error === "object" && error !== null && "message" in error
    ? String((error as { message: unknown }).message)
    : String(error)).slice(0, 500)

/**
 * Imports the keys and returns the receiver; a bad secret is an `InvalidSecret`.
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<Receiver, WebhookSignature.InvalidSecret> =>
  Effect.gen(function*() {
    const secrets: ReadonlyArray<WebhookSignature.SecretInput> = Array.isArray(options.secret)
      ? options.secret
      : [options.secret as WebhookSignature.SecretInput]
    if (secrets.length === 0) {
      return yield* new WebhookSignature.InvalidSecret({ message: "a receiver needs at least one secret" })
    }
    const keys = yield* Effect.forEach(secrets, (s) => WebhookSignature.key(s))
    const tolerance = Duration.toMillis(Duration.fromInputUnsafe(options.tolerance ?? "5 minutes"))
    const maxBodyBytes = options.maxBodyBytes ?? 1_048_576
    const consumer = options.consumer

    const verify = (request: Request): Effect.Effect<Webhook, WebhookRejected> =>
      Effect.gen(function*() {
        const id = request.headers.get(WebhookSignature.Headers.id)
        const timestampText = request.headers.get(WebhookSignature.Headers.timestamp)
        const signature = request.headers.get(WebhookSignature.Headers.signature)
        if (id === null || id === "" || timestampText === null || signature === null) {
          return yield* reject(400, "missing webhook-id, webhook-timestamp or webhook-signature")
        }
        if (!/^\d{1,12}$/.test(timestampText)) return yield* reject(400, "webhook-timestamp is not a number of seconds")
        const timestamp = Number(timestampText)
        const now = yield* Clock.currentTimeMillis
        if (Math.abs(now - timestamp * 1000) > tolerance) {
          return yield* reject(400, "webhook-timestamp is outside the tolerance (replayed, or a clock is off)")
        }
        const declared = Number(request.headers.get("content-length") ?? "0")
        if (declared > maxBodyBytes) {
          return yield* reject(413, `body over ${maxBodyBytes} bytes`)
        }
        const read = yield* Effect.tryPromise({
          try: () => readBounded(request.body, maxBodyBytes),
          catch: () => reject(400, "the body could not be read")
        })
        if (read.truncated) return yield* reject(413, `body over ${maxBodyBytes} bytes`)
        if (!(yield* WebhookSignature.isValid(keys, signature, id, timestamp, read.text))) {
          return yield* reject(401, "no valid signature")
        }
        let parsed: unknown
        try {
          parsed = JSON.parse(read.text)
        } catch {
          return yield* reject(400, "the body is not JSON")
        }
        const shape = typeof parsed === "object" && parsed !== null
          ? parsed as { readonly type?: unknown; readonly data?: unknown }
          : {}
        return {
          id,
          timestamp: new Date(timestamp * 1000),
          body: read.text,
          json: parsed,
          type: typeof shape.type === "string" ? shape.type : undefined,
          data: shape.data,
          headers: request.headers
        }
      })

    const handle = <E, R>(
      request: Request,
      handler: (webhook: Webhook) => Effect.Effect<void, E, R>
    ): Effect.Effect<Response, never, R | InboxStore | OutboxStore> =>
      Effect.gen(function*() {
        const verified = yield* Effect.result(verify(request))
        if (verified._tag === "Failure") {
          return json(verified.failure.status, { error: { tag: "WebhookRejected", message: verified.failure.message } })
        }
        const webhook = verified.success
        const exit = yield* Effect.exit(
          Inbox.handle(consumer, webhook.id, Effect.suspend(() => handler(webhook)), options.inbox)
        )
        if (Exit.isSuccess(exit)) {
          return new Response(null, {
            status: 204,
            headers: { "webhook-outcome": exit.value._tag === "Duplicate" ? "duplicate" : "processed" }
          })
        }
        const failure = Cause.findErrorOption(exit.cause)
        if (Option.isSome(failure)) {
          const error = failure.value
          // Retryable (the database is down, a transient dependency): the sender tries again later.
          if (isRetryable(error)) return json(503, { error: { tag: errorTag(error), message: errorMessage(error) } })
          return json(422, { error: { tag: errorTag(error), message: errorMessage(error) } })
        }
        if (Cause.hasInterruptsOnly(exit.cause)) {
          return json(503, { error: { tag: "Interrupted", message: "the request was interrupted" } })
        }
        yield* Effect.logError("webhook handler defect", exit.cause).pipe(
          Effect.annotateLogs({ consumer, webhookId: webhook.id })
        )
        return json(500, { error: { tag: "Defect", message: "internal error" } })
      })

    return { consumer, verify, handle }
  })

/**
 * What {@link hono} needs of a runtime: `@tidings/hono`'s `Runtime`, or an Effect `ManagedRuntime`.
 * @since 0.1.0
 * @category models
 */
export interface RunsEffects<R> {
  readonly runPromiseExit: <A, E>(
    effect: Effect.Effect<A, E, R>,
    options?: { readonly signal?: AbortSignal }
  ) => Promise<Exit.Exit<A, E>>
}

/**
 * A Hono handler (`app.post("/webhooks", WebhookReceiver.hono(rt, options, handler))`) on an app's
 * runtime, which must provide an `InboxStore` (e.g. `PgInboxStore`, whose transaction the handler's
 * SQL joins). The keys are imported on the first request; a bad secret answers 500 and is logged.
 * @since 0.1.0
 * @category handlers
 */
export const hono = <E, R>(
  runtime:
    & RunsEffects<R>
    & ([InboxStore | OutboxStore] extends [R] ? unknown
      : { readonly "the runtime must provide an InboxStore and an OutboxStore": never }),
  options: Options,
  handler: (webhook: Webhook) => Effect.Effect<void, E, NoInfer<R>>
): (c: { readonly req: { readonly raw: Request } }) => Promise<Response> => {
  let receiver: Promise<Exit.Exit<Receiver, WebhookSignature.InvalidSecret>> | undefined
  return async (c) => {
    const made = await (receiver ??= Effect.runPromiseExit(make(options)))
    if (Exit.isFailure(made)) {
      await Effect.runPromise(Effect.logError("webhook receiver misconfigured", made.cause))
      return json(500, { error: { tag: "InvalidSecret", message: "the webhook receiver is misconfigured" } })
    }
    const request = c.req.raw
    const exit = await runtime.runPromiseExit(
      made.value.handle(request, handler) as Effect.Effect<Response, never, R>,
      { signal: request.signal }
    )
    return Exit.isSuccess(exit)
      ? exit.value
      : json(503, { error: { tag: "Interrupted", message: "the request was interrupted" } })
  }
}
