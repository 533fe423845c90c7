/**
 * The console's JSON API: one overview call for the dashboard (refreshed every few seconds), lists
 * and actions for the outbox, the inbox, the broker's dead-letter queues and sagas. Views whose
 * store the app does not provide answer `null` in the overview and 501 on their own routes.
 */
import * as Admin from "@tidings/core/Admin"
import * as Health from "@tidings/core/Health"
import { InboxStore } from "@tidings/core/InboxStore"
import { OutboxStore, toObject as eventJson } from "@tidings/core/OutboxStore"
import { Relay } from "@tidings/core/Relay"
import { SagaStore } from "@tidings/core/SagaStore"
import { type Context, Effect, Metric, Option, Schema } from "effect"
import type { Hono } from "hono"
import * as HttpErrors from "../HttpErrors.ts"
import * as Input from "../Input.ts"
import type { Runtime } from "../Runtime.ts"
import type { DeadLetterQueues } from "./deadLetterQueues.ts"

export interface Settings {
  readonly checks: ReadonlyArray<Health.Check<any>>
  readonly deadLetterQueues: DeadLetterQueues<any> | undefined
  readonly refreshIntervalMs: number
  readonly throughputMinutes: number
  readonly maxLimit: number
}

const optional = <I, S>(tag: Context.Key<I, S>, name: string): Effect.Effect<S, HttpErrors.NotImplemented> =>
  Effect.flatMap(
    Effect.serviceOption(tag),
    (o) =>
      Option.isSome(o)
        ? Effect.succeed(o.value)
        : Effect.fail(new HttpErrors.NotImplemented({ message: `this app provides no ${name}` }))
  )

/** Runs `f` with the service when the app has it; `null` otherwise. */
const ifPresent = <I, S, A, E, R>(
  tag: Context.Key<I, S>,
  f: (service: S) => Effect.Effect<A, E, R>
): Effect.Effect<A | null, E, R> =>
  Effect.flatMap(Effect.serviceOption(tag), (o) => Option.isSome(o) ? f(o.value) : Effect.succeed(null))

interface ConsumerCounters {
  consumed: number
  acked: number
  retried: number
  deadLettered: number
}

const consumerSeries: Record<string, keyof ConsumerCounters> = {
  tidings_consumer_consumed_total: "consumed",
  tidings_consumer_acked_total: "acked",
  tidings_consumer_retried_total: "retried",
  tidings_consumer_dead_lettered_total: "deadLettered"
}

const counterValue = (s: Metric.Metric.Snapshot): number => {
  if (s.type !== "Counter") return 0
  const count = (s.state as { readonly count: number | bigint }).count
  return typeof count === "bigint" ? Number(count) : count
}

/**
 * This process's consumers, from the consumer metrics every transport records: each delivery is
 * counted when it arrives and again when it is acked, retried or dead-lettered, so the difference
 * is what is in flight.
 */
const localConsumers = Effect.map(Metric.snapshot, (snapshots) => {
  const byName = new Map<string, ConsumerCounters>()
  let published = 0
  for (const s of snapshots) {
    if (s.id === "tidings_outbox_published_total") published += counterValue(s)
    const field = consumerSeries[s.id]
    const name = s.attributes?.["consumer"]
    if (field === undefined || typeof name !== "string") continue
    const counters = byName.get(name) ?? { consumed: 0, acked: 0, retried: 0, deadLettered: 0 }
    counters[field] += counterValue(s)
    byName.set(name, counters)
  }
  return {
    published,
    consumers: [...byName].map(([name, c]) => ({
      name,
      ...c,
      inFlight: Math.max(0, c.consumed - c.acked - c.retried - c.deadLettered)
    }))
  }
})

const describeError = (error: unknown): string => {
  const { body } = HttpErrors.describe(error)
  return body.error.message
}

const overview = (settings: Settings) =>
  Effect.gen(function*() {
    const [outbox, inbox, sagas, relay, local, components, deadLetterQueues] = yield* Effect.all([
      ifPresent(OutboxStore, (store) =>
        Effect.all({
          stats: store.stats,
          throughput: store.throughput({ minutes: settings.throughputMinutes }),
          failedByType: store.countByType({ status: "failed" }),
          holders: store.holders
        }, { concurrency: 4 })),
      ifPresent(InboxStore, (store) => store.count()),
      ifPresent(SagaStore, (store) => store.countByStatus),
      ifPresent(Relay, (r) => Effect.map(r.isRunning, (running) => ({ r, running }))),
      localConsumers,
      Health.run(settings.checks),
      settings.deadLetterQueues === undefined
        ? Effect.succeed(null)
        : Effect.match(settings.deadLetterQueues.list, {
          onFailure: (error) => ({ queues: [], error: describeError(error) }),
          onSuccess: (queues) => ({ queues, error: null })
        })
    ], { concurrency: "unbounded" })
    const group = relay === null ? undefined : relay.r.relayIds[0]?.replace(/-\d+$/, "")
    const consumers = yield* Effect.forEach(local.consumers, (c) =>
      Effect.map(
        ifPresent(InboxStore, (store) => store.count({ consumer: c.name })),
        (rows) => ({ ...c, inbox: rows })
      ), { concurrency: 4 })
    return {
      now: new Date(),
      refreshIntervalMs: settings.refreshIntervalMs,
      outbox: outbox === null ? null : {
        ...outbox.stats,
        throughput: outbox.throughput,
        failedByType: outbox.failedByType
      },
      relays: {
        local: relay === null ? null : {
          name: relay.r.settings.name,
          running: relay.running,
          relayIds: relay.r.relayIds,
          ordering: relay.r.settings.ordering,
          dispatch: relay.r.settings.dispatch,
          concurrency: relay.r.settings.concurrency,
          batchSize: relay.r.settings.batchSize,
          published: local.published
        },
        holders: (outbox?.holders ?? []).map((h) => ({
          ...h,
          local: group !== undefined && h.holder.startsWith(`${group}-`)
        }))
      },
      consumers,
      inbox,
      sagas,
      components: components.checks,
      deadLetterQueues
    }
  })

const Uuid = Schema.String.check(Schema.isUUID())
const Name = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(500))
const OutboxStatus = Schema.Literals(["pending", "processing", "published", "failed", "suspect"])
const InboxStatus = Schema.Literals(["processing", "processed", "failed"])
const SagaStatus = Schema.Literals(["running", "completed", "compensating", "compensated", "failed"])
const Limit = (max: number) =>
  Schema.optional(Schema.NumberFromString.check(Schema.isInt(), Schema.isBetween({ minimum: 1, maximum: max })))

const RetryBody = Schema.Union([
  Schema.Struct({ ids: Schema.Array(Uuid).check(Schema.isMinLength(1), Schema.isMaxLength(1000)) }),
  Schema.Struct({ type: Name }),
  Schema.Struct({ all: Schema.Literal(true) })
])
const IdsBody = Schema.Struct({ ids: Schema.Array(Uuid).check(Schema.isMinLength(1), Schema.isMaxLength(1000)) })
const ReplayBody = Schema.Struct({ messageId: Name, consumer: Name })
const DlqReplayBody = Schema.Struct({
  limit: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 100_000 })))
})

/** Registers the API's routes on `api` (mounted at `/api`, behind the guard). */
export const register = (api: Hono, runtime: Runtime<any>, settings: Settings): void => {
  const max = settings.maxLimit
  const limitOf = (limit: number | undefined) => limit ?? Math.min(100, max)
  const dlq = settings.deadLetterQueues === undefined
    ? Effect.fail(new HttpErrors.NotImplemented({ message: "no dead-letter queues are configured for this console" }))
    : Effect.succeed(settings.deadLetterQueues)

  api.get("/overview", runtime.handler(() => overview(settings)))

  const EventsQuery = Schema.Struct({
    status: Schema.optional(OutboxStatus),
    type: Schema.optional(Name),
    limit: Limit(max)
  })
  api.get(
    "/outbox/events",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const q = yield* Input.query(c, EventsQuery)
        const store = yield* optional(OutboxStore, "OutboxStore")
        const events = yield* store.list({
          limit: limitOf(q.limit),
          ...(q.status === undefined ? {} : { status: q.status }),
          ...(q.type === undefined ? {} : { type: q.type })
        })
        return { events: events.map(eventJson) }
      })
    )
  )
  api.get(
    "/outbox/events/:id",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const id = yield* Input.param(c, "id", Uuid)
        const event = yield* (yield* optional(OutboxStore, "OutboxStore")).get(id)
        if (event === undefined) return yield* new HttpErrors.NotFound({ message: `no outbox event ${id}` })
        return eventJson(event)
      })
    )
  )
  api.post(
    "/outbox/failed/retry",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const body = yield* Input.json(c, RetryBody)
        yield* optional(OutboxStore, "OutboxStore")
        return { retried: yield* Admin.retryFailed(body) }
      })
    )
  )
  api.post(
    "/outbox/failed/discard",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const { ids } = yield* Input.json(c, IdsBody)
        return { discarded: yield* (yield* optional(OutboxStore, "OutboxStore")).discardFailed(ids) }
      })
    )
  )

  const InboxQuery = Schema.Struct({
    status: Schema.optional(InboxStatus),
    consumer: Schema.optional(Name),
    limit: Limit(max)
  })
  api.get(
    "/inbox",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const q = yield* Input.query(c, InboxQuery)
        const store = yield* optional(InboxStore, "InboxStore")
        return {
          records: yield* store.list({
            limit: limitOf(q.limit),
            ...(q.status === undefined ? {} : { status: q.status }),
            ...(q.consumer === undefined ? {} : { consumer: q.consumer })
          })
        }
      })
    )
  )
  api.post(
    "/inbox/replay",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const { consumer, messageId } = yield* Input.json(c, ReplayBody)
        yield* optional(InboxStore, "InboxStore")
        const replayed = yield* Admin.replayDeadLetter(messageId, consumer)
        if (!replayed.reset) {
          return yield* new HttpErrors.NotFound({
            message: `no dead-lettered inbox row for message ${messageId} and consumer ${consumer}`
          })
        }
        return replayed
      })
    )
  )

  const PeekQuery = Schema.Struct({ limit: Limit(Math.min(max, 100)) })
  api.get("/dlq", runtime.handler(() => Effect.map(Effect.flatMap(dlq, (d) => d.list), (queues) => ({ queues }))))
  api.get(
    "/dlq/:queue/messages",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const queue = yield* Input.param(c, "queue", Name)
        const { limit } = yield* Input.query(c, PeekQuery)
        return { messages: yield* (yield* dlq).peek(queue, limit ?? 20) }
      })
    )
  )
  api.post(
    "/dlq/:queue/replay",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const queue = yield* Input.param(c, "queue", Name)
        const { limit } = yield* Input.json(c, DlqReplayBody)
        return { replayed: yield* (yield* dlq).replay(queue, limit === undefined ? {} : { limit }) }
      })
    )
  )

  const SagasQuery = Schema.Struct({
    status: Schema.optional(SagaStatus),
    type: Schema.optional(Name),
    limit: Limit(max)
  })
  api.get(
    "/sagas",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const q = yield* Input.query(c, SagasQuery)
        const store = yield* optional(SagaStore, "SagaStore")
        return {
          sagas: yield* store.list({
            limit: limitOf(q.limit),
            ...(q.status === undefined ? {} : { status: q.status }),
            ...(q.type === undefined ? {} : { type: q.type })
          })
        }
      })
    )
  )
  api.get(
    "/sagas/:id",
    runtime.handler((c) =>
      Effect.gen(function*() {
        const id = yield* Input.param(c, "id", Uuid)
        const execution = yield* (yield* optional(SagaStore, "SagaStore")).load(id)
        if (execution === undefined) return yield* new HttpErrors.NotFound({ message: `no saga ${id}` })
        return { ...execution, timeline: Admin.timeline(execution, Date.now()) }
      })
    )
  )
  for (
    const [action, run] of [["retry", Admin.retrySaga], [
      "compensate",
      (id: string) => Admin.compensateSaga(id)
    ]] as const
  ) {
    api.post(
      `/sagas/:id/${action}`,
      runtime.handler((c) =>
        Effect.gen(function*() {
          const id = yield* Input.param(c, "id", Uuid)
          yield* optional(SagaStore, "SagaStore")
          return { saga: yield* run(id) }
        })
      )
    )
  }
}
