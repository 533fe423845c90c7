/**
 * Mountable Hono sub-apps: the saga view, the outbox admin, the inbox and dead-letter views, health
 * and readiness probes and Prometheus metrics. Mount each with `app.route(prefix, ...)`, or all of
 * them under one prefix with {@link all}.
 *
 * The admin views (sagas, outbox, inbox, dead letters) are closed unless given a guard: a bearer
 * token (`Redacted`) or a Hono middleware (see `Auth`). Health, readiness and metrics are open (probes
 * and scrapers rarely authenticate); metrics take an optional guard.
 *
 * A view whose store the app does not provide (e.g. no `InboxStore` in an app without consumers)
 * answers 501 instead of failing to type-check in {@link all}; the single-view builders require it.
 * @module
 */
import * as Health from "@tidings/core/Health"
import { InboxStore } from "@tidings/core/InboxStore"
import * as Message from "@tidings/core/Message"
import type { FailedEvent } from "@tidings/core/OutboxStore"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { SagaStore } from "@tidings/core/SagaStore"
import { Wakeups } from "@tidings/core/Wakeup"
import { type Context, type Duration, Effect, Option, Schema } from "effect"
import { Hono } from "hono"
import * as Auth from "./Auth.ts"
import * as HttpErrors from "./HttpErrors.ts"
import * as Input from "./Input.ts"
import * as Prometheus from "./Prometheus.ts"
import type { Runtime } from "./Runtime.ts"

/**
 * Options of the admin views.
 * @since 0.1.0
 * @category options
 */
export interface AdminOptions {
  /** A bearer token (`Redacted`) or a middleware. Without one every request answers 403. */
  readonly auth?: Auth.Guard
  /** The largest `limit` a list accepts (default 1000). */
  readonly maxLimit?: number
}

/**
 * Options of {@link health}.
 * @since 0.1.0
 * @category options
 */
export interface HealthOptions<R = never> {
  /**
   * The admin guard: a request that passes it gets `/ready`'s details (each check's message and
   * duration); others get names and up / down only. Without it nobody gets details.
   */
  readonly auth?: Auth.Guard
  /** The readiness checks run by `GET /ready` (e.g. `PgClient.readiness`, `Health.relay`). */
  readonly checks?: ReadonlyArray<Health.Check<R>>
  /** Each check is down after this long (default 2 s). */
  readonly timeout?: Duration.Input
}

/**
 * Options of {@link metrics}.
 * @since 0.1.0
 * @category options
 */
export interface MetricsOptions extends Prometheus.Options {
  /** An optional guard; without one the route is open. */
  readonly auth?: Exclude<Auth.Guard, undefined>
}

/**
 * Options of {@link all}.
 * @since 0.1.0
 * @category options
 */
export interface AllOptions<R = never> extends AdminOptions, HealthOptions<R> {
  readonly metrics?: MetricsOptions | false
}

const Uuid = Schema.String.check(Schema.isUUID())

const limitQuery = (max: number) =>
  Schema.optional(Schema.NumberFromString.check(Schema.isInt(), Schema.isBetween({ minimum: 1, maximum: max })))
const defaultLimit = 100

const maxLimitOf = (options: AdminOptions) => {
  const max = options.maxLimit ?? 1000
  if (!Number.isInteger(max) || max < 1) {
    throw new Error(`maxLimit must be a positive integer, got ${String(options.maxLimit)}`)
  }
  return max
}

// Reads a store if the app provides it: 501 otherwise (only reachable through `all`).
const optional = <I, S>(tag: Context.Key<I, S>, name: string): Effect.Effect<S, HttpErrors.NotImplemented> =>
  Effect.flatMap(
    Effect.serviceOption(tag),
    (o) =>
      Option.isSome(o)
        ? Effect.succeed(o.value)
        : Effect.fail(new HttpErrors.NotImplemented({ message: `this app provides no ${name}` }))
  )

const guarded = (auth: Auth.Guard) => {
  const app = new Hono()
  app.use("*", Auth.middleware(auth))
  return app
}

/**
 * A failed outbox event as JSON.
 * @since 0.1.0
 * @category models
 */
export interface FailedEventJson {
  readonly id: string
  readonly type: string
  readonly version: number
  readonly aggregateType: string
  readonly aggregateId: string
  readonly orderingKey: string
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  readonly occurredAt: Date
  readonly attempts: number
  readonly lastError: string | null
  readonly createdAt: Date
}

const failedEventJson = (e: FailedEvent): FailedEventJson => ({
  ...Message.toObject(e.message),
  attempts: e.attempts,
  lastError: e.lastError,
  createdAt: e.createdAt
})

type AnyRuntime = Runtime<any>

/**
 * `GET /:id`: a saga execution with its steps (`{ saga, steps }`), 404 when unknown, 400 for an id
 * that is not a UUID. Includes the saga's input and the steps' results: guard it like the other views.
 * @since 0.1.0
 * @category routes
 */
export const sagas = <R>(runtime: Runtime<R | SagaStore>, options: AdminOptions = {}): Hono =>
  sagasRoutes(runtime, options)

const sagasRoutes = (runtime: AnyRuntime, options: AdminOptions): Hono => {
  const app = guarded(options.auth)
  app.get(
    "/:id",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const id = yield* Input.param(c, "id", Uuid)
        const store = yield* optional(SagaStore, "SagaStore")
        const execution = yield* store.load(id)
        if (execution === undefined) return yield* new HttpErrors.NotFound({ message: `no saga ${id}` })
        return execution
      })
    )
  )
  return app
}

const IdsBody = Schema.Struct({ ids: Schema.Array(Uuid).check(Schema.isMinLength(1), Schema.isMaxLength(1000)) })
const RetryBody = Schema.Union([IdsBody, Schema.Struct({ all: Schema.Literal(true) })])

/**
 * The outbox admin:
 * - `GET /stats`: counts by status and the age of the oldest pending event;
 * - `GET /failed?limit=100`: failed events (oldest first) with their last error;
 * - `POST /failed/retry` with `{ "ids": [...] }` or `{ "all": true }`: back to pending, attempts
 *   reset, relays woken; `POST /failed/:id/retry` for one (404 when it is not failed);
 * - `POST /failed/discard` with `{ "ids": [...] }`; `DELETE /failed/:id` for one: deleted for good.
 * @since 0.1.0
 * @category routes
 */
export const outbox = <R>(runtime: Runtime<R | OutboxStore>, options: AdminOptions = {}): Hono =>
  outboxRoutes(runtime, options)

const outboxRoutes = (runtime: AnyRuntime, options: AdminOptions): Hono => {
  const max = maxLimitOf(options)
  const ListQuery = Schema.Struct({ limit: limitQuery(max) })
  const app = guarded(options.auth)
  const store = optional(OutboxStore, "OutboxStore")
  const retry = (ids: ReadonlyArray<string> | undefined) =>
    Effect.gen(function*() {
      const n = yield* (yield* store).retryFailed(ids)
      // Local relays pick the events up now instead of at their next poll.
      if (n > 0) yield* (yield* Wakeups).signal("local")
      return n
    })

  app.get("/stats", runtime.handler(() => Effect.flatMap(store, (s) => s.stats)))
  app.get(
    "/failed",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const { limit } = yield* Input.query(c, ListQuery)
        const events = yield* (yield* store).listFailed({ limit: limit ?? Math.min(defaultLimit, max) })
        return { events: events.map(failedEventJson) }
      })
    )
  )
  app.post(
    "/failed/retry",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const body = yield* Input.json(c, RetryBody)
        return { retried: yield* retry("ids" in body ? body.ids : undefined) }
      })
    )
  )
  app.post(
    "/failed/discard",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const { ids } = yield* Input.json(c, IdsBody)
        return { discarded: yield* (yield* store).discardFailed(ids) }
      })
    )
  )
  app.post(
    "/failed/:id/retry",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const id = yield* Input.param(c, "id", Uuid)
        const n = yield* retry([id])
        if (n === 0) return yield* new HttpErrors.NotFound({ message: `no failed outbox event ${id}` })
        return { retried: n }
      })
    )
  )
  app.delete(
    "/failed/:id",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const id = yield* Input.param(c, "id", Uuid)
        const n = yield* (yield* store).discardFailed([id])
        if (n === 0) return yield* new HttpErrors.NotFound({ message: `no failed outbox event ${id}` })
        return { discarded: n }
      })
    )
  )
  return app
}

const Status = Schema.Literals(["processing", "processed", "failed"])
const Name = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(500))

/**
 * The inbox views:
 * - `GET /?status=failed&consumer=billing&limit=100`: rows, most recent first;
 * - `GET /counts?consumer=billing`: rows by status;
 * - `GET /:consumer/:messageId`: one row, 404 when unknown.
 * @since 0.1.0
 * @category routes
 */
export const inbox = <R>(runtime: Runtime<R | InboxStore>, options: AdminOptions = {}): Hono =>
  inboxRoutes(runtime, options)

const inboxRoutes = (runtime: AnyRuntime, options: AdminOptions): Hono => {
  const max = maxLimitOf(options)
  const ListQuery = Schema.Struct({
    limit: limitQuery(max),
    status: Schema.optional(Status),
    consumer: Schema.optional(Name)
  })
  const CountQuery = Schema.Struct({ consumer: Schema.optional(Name) })
  const app = guarded(options.auth)
  const store = optional(InboxStore, "InboxStore")
  app.get(
    "/",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const q = yield* Input.query(c, ListQuery)
        const records = yield* (yield* store).list({
          limit: q.limit ?? Math.min(defaultLimit, max),
          ...(q.status === undefined ? {} : { status: q.status }),
          ...(q.consumer === undefined ? {} : { consumer: q.consumer })
        })
        return { records }
      })
    )
  )
  app.get(
    "/counts",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const q = yield* Input.query(c, CountQuery)
        return yield* (yield* store).count(q.consumer === undefined ? {} : { consumer: q.consumer })
      })
    )
  )
  app.get(
    "/:consumer/:messageId",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const consumer = yield* Input.param(c, "consumer", Name)
        const messageId = yield* Input.param(c, "messageId", Name)
        const record = yield* (yield* store).get(messageId, consumer)
        if (record === undefined) {
          return yield* new HttpErrors.NotFound({
            message: `no inbox row for message ${messageId} and consumer ${consumer}`
          })
        }
        return record
      })
    )
  )
  return app
}

/**
 * `GET /?limit=100&consumer=billing`: the dead letters, `{ inbox, outbox }`: inbox rows in status
 * `failed` with their reason (`lastError`), and the outbox's failed events with their last error.
 * A side whose store the app does not provide is an empty list.
 * @since 0.1.0
 * @category routes
 */
export const deadLetters = <R>(runtime: Runtime<R | InboxStore | OutboxStore>, options: AdminOptions = {}): Hono =>
  deadLettersRoutes(runtime, options)

const deadLettersRoutes = (runtime: AnyRuntime, options: AdminOptions): Hono => {
  const max = maxLimitOf(options)
  const Query = Schema.Struct({ limit: limitQuery(max), consumer: Schema.optional(Name) })
  const app = guarded(options.auth)
  app.get(
    "/",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const q = yield* Input.query(c, Query)
        const inboxStore = yield* Effect.serviceOption(InboxStore)
        const outboxStore = yield* Effect.serviceOption(OutboxStore)
        const [inboxRows, outboxRows] = yield* Effect.all([
          Option.isSome(inboxStore)
            ? inboxStore.value.list({
              status: "failed",
              limit: q.limit ?? Math.min(defaultLimit, max),
              ...(q.consumer === undefined ? {} : { consumer: q.consumer })
            })
            : Effect.succeed([]),
          Option.isSome(outboxStore)
            ? outboxStore.value.listFailed({ limit: q.limit ?? Math.min(defaultLimit, max) })
            : Effect.succeed([])
        ], { concurrency: 2 })
        return { inbox: inboxRows, outbox: outboxRows.map(failedEventJson) }
      })
    )
  )
  return app
}

/**
 * `GET /health`: liveness, always `{ "status": "up" }` while the process serves requests.
 * `GET /ready`: readiness, runs `checks`: 200 when all are up, 503 otherwise, with
 * `{ status, checks: [{ name, status }] }`; a request passing `auth` also gets each check's
 * `message` (why it is down) and `durationMs`. Error text never reaches anonymous callers.
 * @since 0.1.0
 * @category routes
 */
export const health = <R>(runtime: Runtime<R>, options: HealthOptions<NoInfer<R>> = {}): Hono => {
  const checks = options.checks ?? []
  const admin = options.auth === undefined ? undefined : Auth.middleware(options.auth)
  const app = new Hono()
  app.get("/health", (c) => c.json({ status: "up" }))
  app.get(
    "/ready",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const report = yield* Health.run(checks, options.timeout === undefined ? {} : { timeout: options.timeout })
        const details = yield* Effect.promise(() => Auth.allows(admin, c))
        const body = details
          ? report
          : {
            status: report.status,
            checks: report.checks.map((check) => ({ name: check.name, status: check.status }))
          }
        return c.json(body, report.status === "up" ? 200 : 503)
      })
    )
  )
  return app
}

/**
 * `GET /metrics`: the Effect metrics registry in the Prometheus text format 0.0.4.
 * @since 0.1.0
 * @category routes
 */
export const metrics = <R>(runtime: Runtime<R>, options: MetricsOptions = {}): Hono => {
  const app = new Hono()
  if (options.auth !== undefined) app.use("/metrics", Auth.middleware(options.auth))
  app.get(
    "/metrics",
    runtime.handler(() =>
      Effect.map(
        Prometheus.renderWith(options),
        (text) => new Response(text, { headers: { "content-type": Prometheus.contentType } })
      )
    )
  )
  return app
}

/**
 * Everything under one prefix: `/health`, `/ready` (details for `auth`), `/metrics` (unless `metrics: false`), and the
 * guarded views `/sagas/:id`, `/outbox/...`, `/inbox/...`, `/dead-letters`. Views whose store the app
 * does not provide answer 501.
 * @since 0.1.0
 * @category routes
 */
export const all = <R>(runtime: Runtime<R>, options: AllOptions<NoInfer<R>> = {}): Hono => {
  const admin: AdminOptions = {
    ...(options.auth === undefined ? {} : { auth: options.auth }),
    ...(options.maxLimit === undefined ? {} : { maxLimit: options.maxLimit })
  }
  const app = new Hono()
  app.route("/", health(runtime, options))
  if (options.metrics !== false) app.route("/", metrics(runtime, options.metrics ?? {}))
  app.route("/sagas", sagasRoutes(runtime, admin))
  app.route("/outbox", outboxRoutes(runtime, admin))
  app.route("/inbox", inboxRoutes(runtime, admin))
  app.route("/dead-letters", deadLettersRoutes(runtime, admin))
  return app
}
