/**
 * `npm run bench -- latency`: how long an event waits between its producer's COMMIT and the broker's
 * receipt, under a paced load, with two ways for relays to learn about new events:
 * - `notify`: the store sends `pg_notify` for appends (`notify: true`, coalesced after commit, or
 *   `--notify in-transaction`) and `PgWakeup` LISTENs and turns notifications into wake-ups; relays
 *   in this process are also woken by the in-process hub right after the commit (`Outbox.append`
 *   does that by itself);
 * - `poll`: no wake-ups at all (the relays get a private hub nobody signals): adaptive polling only;
 * - `local` (only when asked for): the in-process hub only, no NOTIFY, as when producers and relays
 *   share a process and nothing else appends;
 * - `listen` (only when asked for): NOTIFY only, as for relays in another process: the relays get a
 *   private hub that only `PgWakeup` (hearing this process's own NOTIFYs too) signals.
 *
 * It also measures what the NOTIFY costs producers: saturated single-event transactions per second
 * with `notify: true` (coalesced, after commit), `"in-transaction"` and `false`.
 *
 * `--transport rabbitmq` runs the same paced load through the RabbitMQ driver: `Relay.layer` with
 * `AmqpPublisher` as its publisher (woken after commit by the in-process hub), and an
 * `AmqpConsumer` on a classic or quorum `Topology.consumerQueue`. Each run gives two latencies per
 * event: commit → the relay's publish returned `Published` (the broker's confirm, `target:
 * "confirm"`) and commit → the consumer's handler received it (`target: "consumer"`).
 * @module
 */
import * as EventRegistry from "@tidings/core/EventRegistry"
import type { Message } from "@tidings/core/Message"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import type * as OutboxStorePort from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import type * as PublisherPort from "@tidings/core/Publisher"
import * as Relay from "@tidings/core/Relay"
import * as Wakeup from "@tidings/core/Wakeup"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as PgWakeup from "@tidings/postgres/PgWakeup"
import * as AmqpConnection from "@tidings/rabbitmq/AmqpConnection"
import * as AmqpConsumer from "@tidings/rabbitmq/AmqpConsumer"
import { Duration, Effect, Layer, type Scope } from "effect"
import * as os from "node:os"
import { monitorEventLoopDelay } from "node:perf_hooks"
import { type Reader, UsageError } from "./lib/cli.ts"
import * as Pg from "./lib/postgres.ts"
import { memoryPublisher, timing } from "./lib/publishers.ts"
import * as Rabbit from "./lib/rabbit.ts"
import * as Naive from "./lib/rabbitNaive.ts"
import * as Pipelined from "./lib/rabbitPipelined.ts"
import { Stages, type Summary as StageSummary } from "./lib/rabbitStages.ts"
import { int, log, ms, secs, table } from "./lib/report.ts"
import * as Seed from "./lib/seed.ts"
import { percentile, round, sorted } from "./lib/stats.ts"

const wakeups = ["eager", "notify", "poll", "local", "listen"] as const
const notifyStyles = ["coalesced", "in-transaction"] as const
/** How the store sends its NOTIFY in `notify` mode: `notify: true` or `notify: "in-transaction"`. */
export type NotifyStyle = (typeof notifyStyles)[number]
type StoreNotify = NonNullable<PgOutboxStore.Options["notify"]>
const storeNotify = (style: NotifyStyle): StoreNotify => (style === "coalesced" ? true : "in-transaction")
/** How relays learn about new events. */
export type WakeupMode = (typeof wakeups)[number]
const transports = ["memory", "rabbitmq"] as const
/** Where the relays publish: the in-memory broker, or RabbitMQ through `@tidings/rabbitmq`. */
export type Transport = (typeof transports)[number]
const queueTypes = ["classic", "quorum"] as const
const relayKinds = ["tidings", "naive", "direct", "publisher", "pipelined"] as const
/**
 * `tidings`: `Relay.layer` + `AmqpPublisher`; `naive`: the hand-written baseline of
 * `lib/rabbitNaive.ts`; `direct`: no relay, each producer publishes its own event on a raw confirm
 * channel right after its commit (a dual write) and waits for the confirm: the broker's share of the
 * latency under the same database load, the floor for any relay; `publisher`: the same dual write
 * through `AmqpPublisher` (the driver's share, without the relay's claim and settle); `pipelined`:
 * the experimental relay of `lib/rabbitPipelined.ts`, which claims again without waiting for confirms.
 */
export type RelayKind = (typeof relayKinds)[number]

/** Settings of `bench latency`. */
export interface Options {
  readonly quick: boolean
  readonly transports: ReadonlyArray<Transport>
  /** Paced rates per transport (`--rates` sets both). */
  readonly rates: { readonly [T in Transport]: ReadonlyArray<number> }
  /** Wake-up modes per transport (`--wakeup` sets both): memory compares NOTIFY and polling, RabbitMQ runs use the in-process hub. */
  readonly wakeups: { readonly [T in Transport]: ReadonlyArray<WakeupMode> }
  readonly notify: NotifyStyle
  /** RabbitMQ queue types to run. */
  readonly queues: ReadonlyArray<Rabbit.QueueType>
  /** RabbitMQ relays to run. */
  readonly relayKinds: ReadonlyArray<RelayKind>
  /** Confirm channels of the `AmqpPublisher`. */
  readonly channels: number
  /** Events claimed per batch (by every relay kind). */
  readonly batchSize: number
  /** Handlers of the RabbitMQ consumer running at once, and its prefetch. */
  readonly consumerConcurrency: number
  readonly prefetch: number
  /** Measured seconds per paced run (after the warm-up). */
  readonly duration: number
  /** Unmeasured seconds at the start of each paced run. */
  readonly warmup: number
  readonly relays: number
  /** Producer fibers sharing the paced load (each transaction holds a connection). */
  readonly producers: number
  /** Measured seconds per producer-throughput round; two rounds per mode in a full run. */
  readonly producerSeconds: number
  readonly producerRounds: number
}

/**
 * Reads the `latency` flags: `--quick`, `--transport`, `--rates`, `--wakeup`, `--notify`, `--queue`,
 * `--relay`, `--channels`, `--batch`, `--duration`, `--relays`, `--producers`,
 * `--consumer-concurrency`, `--prefetch`.
 */
export const options = (args: Reader): Options => {
  const quick = args.bool("quick")
  const single = (name: string) => {
    const list = args.integers(name)
    if (list !== undefined && list.length !== 1) throw new UsageError(`--${name} takes one number for latency`)
    return list?.[0]
  }
  const rates = args.integers("rates")
  const wakeup = args.choices("wakeup", wakeups)
  const consumerConcurrency = single("consumer-concurrency") ?? 64
  return {
    quick,
    transports: args.choices("transport", transports) ?? transports,
    rates: { memory: rates ?? [200, 1_000], rabbitmq: rates ?? [200, 1_000, 2_000] },
    // Relays in the producers' process are woken after commit by the in-process hub: that is the
    // RabbitMQ runs' setting. The memory runs compare NOTIFY with polling.
    // `eager`: the relays' default, events appended in their process are handed to them after the
    // commit (no claim); the other modes claim every event (`dispatch: "poll"`).
    wakeups: { memory: wakeup ?? ["notify", "poll"], rabbitmq: wakeup ?? ["eager", "local"] },
    notify: args.choices("notify", notifyStyles)?.[0] ?? "coalesced",
    queues: args.choices("queue", queueTypes) ?? queueTypes,
    relayKinds: args.choices("relay", relayKinds) ?? ["tidings"],
    channels: single("channels") ?? 1,
    batchSize: single("batch") ?? 100,
    consumerConcurrency,
    prefetch: single("prefetch") ?? consumerConcurrency * 8,
    duration: args.number("duration") ?? (quick ? 5 : 15),
    warmup: quick ? 1 : 2,
    relays: single("relays") ?? 4,
    producers: single("producers") ?? 16,
    producerSeconds: quick ? 2 : 4,
    producerRounds: quick ? 1 : 3
  }
}

/** What every paced run reports. */
interface Measured {
  readonly wakeup: WakeupMode
  readonly rate: number
  readonly p50Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  /** Events measured (after the warm-up). */
  readonly events: number
  /** Committed events (measured or not) that did not reach the target within 10 s after the producers stopped: 0 expected. */
  readonly lost: number
  /** Commits per second the producers achieved in the measured window. */
  readonly achievedRate: number
  /** Claim statements per second issued by all relays, and the share that came back empty. */
  readonly claimsPerSecond: number
  readonly emptyClaims: number
  /**
   * p99 of Node's event-loop delay in the measured window: producers, relays and consumer share one
   * event loop, and a busy loop delays every callback (a confirm, a query result).
   */
  readonly eventLoopP99Ms: number
}

/** A paced run on the in-memory broker: commit → the broker's publish returned. */
export interface MemoryRun extends Measured {
  readonly transport: "memory"
  readonly target: "publish"
}

/**
 * A paced run on RabbitMQ; each run yields two of these: `confirm` (commit → the relay's publish
 * returned `Published`, i.e. after the broker's confirm) and `consumer` (commit → the consumer's
 * handler got the event).
 */
export interface RabbitRun extends Measured {
  readonly transport: "rabbitmq"
  readonly queue: Rabbit.QueueType
  readonly target: "confirm" | "consumer"
  readonly relay: RelayKind
  /** Deliveries the consumer saw a second time (redeliveries); 0 expected. */
  readonly duplicates: number
  /** Where the commit → confirm time went (`confirm` runs of the Tidings relay; see `lib/rabbitStages.ts`). */
  readonly stages?: StageSummary
}

/** One paced run's measurement, as printed in the JSON output. */
export type Run = MemoryRun | RabbitRun

/** The JSON output of `bench latency`. */
export interface Result {
  readonly runs: ReadonlyArray<Run>
  /**
   * Saturated producers, one event per transaction: transactions per second with `notify: true`,
   * with `notify: false`, and with `notify: "in-transaction"` (with the memory transport only).
   */
  readonly producer?: {
    readonly withWakeup: number
    readonly withoutWakeup: number
    readonly withWakeupInTransaction: number
  }
  readonly meta: Record<string, unknown>
}

/**
 * Pairs each event's commit time with its receipt time. A delivery can (rarely) be seen before the
 * producer fiber records its commit: the relay was woken by the commit and ran first. Such events
 * count as zero latency.
 */
export class LatencyTracker {
  readonly #commits = new Map<string, { readonly at: number; readonly measured: boolean }>()
  readonly #early = new Map<string, number>()
  readonly #delivered = new Set<string>()
  readonly latencies: Array<number> = []
  duplicates = 0

  committed(id: string, at: number, measured: boolean): void {
    const received = this.#early.get(id)
    if (received === undefined) {
      this.#commits.set(id, { at, measured })
      return
    }
    this.#early.delete(id)
    if (measured) this.latencies.push(Math.max(0, received - at))
  }

  received(id: string, at: number): void {
    if (this.#delivered.has(id)) {
      this.duplicates++
      return
    }
    this.#delivered.add(id)
    const commit = this.#commits.get(id)
    if (commit === undefined) {
      this.#early.set(id, at)
      return
    }
    this.#commits.delete(id)
    if (commit.measured) this.latencies.push(at - commit.at)
  }

  /** Committed events not delivered yet. */
  get outstanding(): number {
    return this.#commits.size
  }
}

/**
 * Counts the relays' claim statements (plain claims and settle-and-claim), and the empty ones: a
 * poll or wake-up that found nothing.
 */
const countingClaims = (store: OutboxStorePort.Service) => {
  const counts = { claims: 0, empty: 0 }
  const count = (rows: ReadonlyArray<unknown>) =>
    Effect.sync(() => {
      counts.claims++
      if (rows.length === 0) counts.empty++
    })
  const wrapped: OutboxStorePort.Service = {
    ...store,
    claim: (o) => Effect.tap(store.claim(o), count),
    settleAndClaim: (relayId, settlement, next) => Effect.tap(store.settleAndClaim(relayId, settlement, next), count)
  }
  return { store: wrapped, counts }
}

/**
 * LISTENs on the schema's channel (its own connection) and signals `hub`, as a relay process does.
 * `ignoreOwn: false` also hears this process's own NOTIFYs (the `listen` mode's relays stand for
 * relays in another process).
 */
const listen = (schema: string, hub: Wakeup.Service, ignoreOwn = true) =>
  Layer.build(PgWakeup.layer({ schema, ignoreOwn }).pipe(Layer.provide(Layer.succeed(Wakeup.Wakeups)(hub))))

const sleepUntil = (at: number) => {
  const wait = at - performance.now()
  return wait > 0 ? Effect.sleep(Duration.millis(wait)) : Effect.void
}

/** Waits until `done()` or `timeoutMs`; returns whether it got done. */
export const waitFor = (done: () => boolean, timeoutMs: number) =>
  Effect.gen(function*() {
    const until = performance.now() + timeoutMs
    while (!done() && performance.now() < until) yield* Effect.sleep("5 millis")
    return done()
  })

/** A latency being measured: what the timestamp marks, and the tracker pairing it with commits. */
interface Target {
  readonly target: "publish" | "confirm" | "consumer"
  readonly tracker: LatencyTracker
}

/** Where a paced run's relays publish, and how its events are timed. */
interface Sink {
  /** The relay's publisher, timed: each `Published` result feeds the first target. */
  readonly publisher: PublisherPort.Service
  readonly targets: ReadonlyArray<Target>
  /** Starts the naive relay on this sink instead of `Relay.layer` (RabbitMQ only). */
  readonly startNaive?: (store: OutboxStorePort.Service, hub: Wakeup.Service) => Effect.Effect<void, never, Scope.Scope>
  /** Stage stamps (RabbitMQ only); the store given to the relays must be wrapped by it too. */
  readonly stages?: Stages
  /** Publishes one message on a raw confirm channel and waits for its confirm, which feeds the first target (`direct` runs). */
  readonly publishDirect?: (message: Message) => Effect.Effect<void>
  /** The same through the timed `AmqpPublisher` (`publisher` runs). */
  readonly publishDriver?: (message: Message) => Effect.Effect<void>
}

const memorySink: Effect.Effect<Sink, never, Scope.Scope> = Effect.gen(function*() {
  const tracker = new LatencyTracker()
  return {
    publisher: timing(yield* memoryPublisher, (id, at) => tracker.received(id, at)),
    targets: [{ target: "publish", tracker }]
  }
})

const registry = EventRegistry.make([Seed.OrderPlaced])

/**
 * A fresh consumer queue of `queue`'s type with an `AmqpConsumer` on it, and the `AmqpPublisher` to
 * its exchange, each on a connection of its own (as RabbitMQ recommends). The consumer's handler
 * stamps each event as it gets it. A raw confirm channel serves the `direct` baseline (opened for
 * every run: one idle connection is cheaper than threading the relay kind through here).
 */
const rabbitSink = (url: string, queue: Rabbit.QueueType, opts: Options): Effect.Effect<Sink, never, Scope.Scope> =>
  Effect.gen(function*() {
    const consumerQueue = yield* Rabbit.freshQueue(url, "latency", queue)
    const exchange = Rabbit.exchangeOf(consumerQueue)
    const confirm = new LatencyTracker()
    const consumer = new LatencyTracker()
    const consuming = yield* Rabbit.connection(url, "bench-consumer")
    yield* AmqpConsumer.make({
      name: "bench",
      queue: consumerQueue,
      registry,
      concurrency: opts.consumerConcurrency,
      prefetch: opts.prefetch,
      handler: (delivery) => Effect.sync(() => consumer.received(delivery.messageId ?? "", performance.now()))
    }).pipe(Effect.provideService(AmqpConnection.AmqpConnection, consuming), Effect.orDie)
    const publishing = yield* Rabbit.connection(url, "bench-relay")
    const amqp = yield* Rabbit.publisher(publishing, exchange, opts.channels)
    const stages = new Stages()
    const direct = yield* Effect.flatMap(
      Rabbit.rawConnection(url),
      (model) => Effect.promise(() => model.createConfirmChannel())
    )
    direct.on("error", () => undefined)
    const publisher = timing(stages.publisher(amqp), (id, at) => confirm.received(id, at))
    return {
      publisher,
      publishDriver: (message) => Effect.asVoid(Effect.orDie(publisher.publish([message]))),
      stages,
      targets: [{ target: "confirm", tracker: confirm }, { target: "consumer", tracker: consumer }],
      startNaive: (store, hub) =>
        Naive.start({
          url,
          exchange,
          relays: opts.relays,
          batchSize: opts.batchSize,
          store,
          hub,
          onConfirmed: (id, at) => confirm.received(id, at)
        }),
      publishDirect: (message) =>
        Effect.callback<void>((resume) => {
          const m = Rabbit.outgoing(message, exchange)
          direct.publish(m.exchange, m.routingKey, m.content, m.options, () => {
            confirm.received(message.id, performance.now())
            resume(Effect.void)
          })
        })
    }
  })

/** What one paced run measures. */
export type Plan =
  | { readonly transport: "memory"; readonly wakeup: WakeupMode; readonly rate: number }
  | {
    readonly transport: "rabbitmq"
    readonly wakeup: WakeupMode
    readonly rate: number
    readonly queue: Rabbit.QueueType
    readonly relay: RelayKind
  }

/**
 * One paced run: producers at `rate` events/s, one event per transaction, `relays` relays
 * publishing. Returns one run per target (memory: `publish`; RabbitMQ: `confirm`, `consumer`).
 */
export const paced = (
  url: string,
  rabbitUrl: string | undefined,
  plan: Plan,
  opts: Options,
  /** An existing migrated schema to append to (the suite's bloated table); default: a fresh one. */
  existingSchema?: string
): Effect.Effect<{ readonly runs: ReadonlyArray<Run>; readonly lagMs: number }> =>
  Effect.scoped(Effect.gen(function*() {
    const { rate, wakeup } = plan
    // Producers + relays each hold a connection at times; +2 for stats/reclaim and slack.
    const context = yield* Pg.openPool(url, opts.producers + opts.relays + 2)
    return yield* Effect.gen(function*() {
      const schema = existingSchema ?? (yield* Pg.freshSchema("latency"))
      const notifying = wakeup === "notify" || wakeup === "listen"
      const store = yield* PgOutboxStore.make({ schema, notify: notifying ? storeNotify(opts.notify) : false }).pipe(
        Effect.orDie
      )
      const sink = plan.transport === "memory" ? yield* memorySink : yield* rabbitSink(rabbitUrl!, plan.queue, opts)
      // `Outbox.append` signals the process hub after commit; in poll mode the relays get a private
      // hub instead, so they hear neither that nor anything else.
      const hub = wakeup === "poll" || wakeup === "listen" ? Wakeup.makeHub() : yield* Wakeup.Wakeups
      if (notifying) yield* listen(schema, hub, wakeup !== "listen")
      const claims = countingClaims(sink.stages === undefined ? store : sink.stages.store(store))
      const direct = plan.transport === "rabbitmq" && (plan.relay === "direct" || plan.relay === "publisher")
        ? (plan.relay === "direct" ? sink.publishDirect! : sink.publishDriver!)
        : undefined
      if (plan.transport === "rabbitmq" && plan.relay === "naive") {
        yield* sink.startNaive!(claims.store, hub)
      } else if (plan.transport === "rabbitmq" && plan.relay === "pipelined") {
        yield* Pipelined.start({
          relays: opts.relays,
          batchSize: opts.batchSize,
          maxInFlight: 4,
          store: claims.store,
          publisher: sink.publisher,
          hub
        })
      } else if (direct === undefined) {
        yield* Layer.build(
          Relay.layer({
            name: "bench",
            concurrency: opts.relays,
            batchSize: opts.batchSize,
            dispatch: wakeup === "eager" ? "eager" : "poll"
          }).pipe(
            Layer.provide(Layer.mergeAll(
              Layer.succeed(OutboxStore)(claims.store),
              Layer.succeed(Publisher)(sink.publisher),
              Layer.succeed(Wakeup.Wakeups)(hub)
            ))
          )
        ).pipe(Effect.orDie)
      }

      // Absolute target times (event k at start + k/rate), so a late transaction does not slow the
      // rate down: the next ones are sent at once until the schedule is met again.
      const total = Math.round(rate * (opts.warmup + opts.duration))
      const start = performance.now() + 20
      const measuredFrom = start + opts.warmup * 1000
      let maxLagMs = 0
      let measuredCommits = 0
      let lastCommit = measuredFrom
      const producer = (first: number) =>
        Effect.gen(function*() {
          for (let k = first; k < total; k += opts.producers) {
            const target = start + (k * 1000) / rate
            yield* sleepUntil(target)
            maxLagMs = Math.max(maxLagMs, performance.now() - target)
            const measured = target >= measuredFrom
            const message = yield* Outbox.transaction(Outbox.append(Seed.OrderPlaced, Seed.input(k)))
            const committedAt = performance.now()
            for (const t of sink.targets) t.tracker.committed(message.id, committedAt, measured)
            sink.stages?.committed(message.id, committedAt, measured)
            // The dual-write baselines: the producer publishes its own event right after the commit.
            if (direct !== undefined) yield* direct(message)
            if (measured) {
              measuredCommits++
              lastCommit = Math.max(lastCommit, committedAt)
            }
          }
        })
      const claimsBefore = { ...claims.counts }
      const loop = monitorEventLoopDelay({ resolution: 1 })
      const startLoop = setTimeout(() => loop.enable(), Math.max(0, measuredFrom - performance.now()))
      yield* Effect.forEach(Array.from({ length: opts.producers }, (_, i) => i), producer, {
        concurrency: "unbounded",
        discard: true
      }).pipe(
        // the relays' store: eager dispatch pairs producers and relays by the store they share
        Effect.provideService(OutboxStore, claims.store),
        Effect.orDie
      )
      const producedFor = (lastCommit - measuredFrom) / 1000
      clearTimeout(startLoop)
      loop.disable()
      const eventLoopP99Ms = round(loop.count === 0 ? 0 : loop.percentile(99) / 1e6)
      // Poll mode may need up to the maximum poll interval (2 s) to see the last events.
      if (!(yield* waitFor(() => sink.targets.every((t) => t.tracker.outstanding === 0), 10_000))) {
        for (const t of sink.targets) {
          if (t.tracker.outstanding > 0) {
            log(`  ! ${t.tracker.outstanding} events did not reach ${t.target} within 10 s`)
          }
        }
        process.exitCode = 1
      }
      for (const t of sink.targets) {
        if (t.tracker.duplicates > 0) log(`  (${t.tracker.duplicates} events reached ${t.target} twice)`)
      }
      const window = (performance.now() - measuredFrom) / 1000
      const claimCount = claims.counts.claims - claimsBefore.claims
      const emptyCount = claims.counts.empty - claimsBefore.empty
      const runs = sink.targets.map(({ target, tracker }): Run => {
        const s = sorted(tracker.latencies)
        const measured: Measured = {
          wakeup,
          rate,
          p50Ms: round(percentile(s, 50)),
          p95Ms: round(percentile(s, 95)),
          p99Ms: round(percentile(s, 99)),
          maxMs: round(percentile(s, 100)),
          events: s.length,
          lost: tracker.outstanding,
          achievedRate: Math.round(measuredCommits / producedFor),
          claimsPerSecond: Math.round(claimCount / (window + opts.warmup)),
          emptyClaims: round(claimCount === 0 ? 0 : emptyCount / claimCount, 3),
          eventLoopP99Ms
        }
        return plan.transport === "memory"
          ? { transport: "memory", ...measured, target: "publish" }
          : {
            transport: "rabbitmq",
            queue: plan.queue,
            target: target === "consumer" ? "consumer" : "confirm",
            relay: plan.relay,
            ...measured,
            duplicates: tracker.duplicates,
            ...(target === "confirm" && plan.relay !== "naive" && plan.relay !== "direct" && sink.stages !== undefined
              ? { stages: sink.stages.summary() }
              : {})
          }
      })
      return { runs, lagMs: maxLagMs }
    }).pipe(Effect.provideContext(context))
  }))

/**
 * Saturated producers: `producers` fibers appending one event per transaction as fast as they can
 * for `seconds` (after a 0.5 s warm-up). A LISTEN session is open when notifying, as relays would
 * have one; it counts the notifications, to show how much the coalescing saves. Returns
 * [transactions, seconds, notifications].
 */
const saturated = (url: string, notify: StoreNotify, producers: number, seconds: number) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Pg.openPool(url, producers + 2)
    return yield* Effect.gen(function*() {
      const schema = yield* Pg.freshSchema("producer")
      const store = yield* PgOutboxStore.make({ schema, notify }).pipe(Effect.orDie)
      const from = performance.now() + 500
      const until = from + seconds * 1000
      let notifications = 0
      const counter: Wakeup.Service = {
        ...Wakeup.makeHub(),
        signal: () =>
          Effect.sync(() => void (performance.now() >= from && performance.now() < until && notifications++))
      }
      if (notify !== false) yield* listen(schema, counter)
      let commits = 0
      let k = 0
      yield* Effect.forEach(Array.from({ length: producers }), () =>
        Effect.gen(function*() {
          while (performance.now() < until) {
            yield* Outbox.transaction(Outbox.append(Seed.OrderPlaced, Seed.input(k++)))
            const now = performance.now()
            if (now >= from && now < until) commits++
          }
        }), { concurrency: "unbounded", discard: true }).pipe(Effect.provideService(OutboxStore, store), Effect.orDie)
      return [commits, seconds, notifications] as const
    }).pipe(Effect.provideContext(context))
  }))

const describeRun = (r: Run) =>
  r.transport === "memory"
    ? `${r.wakeup.padEnd(6)} ${String(r.rate).padStart(5)}/s`
    : `${r.queue.padEnd(7)} ${r.relay === "tidings" ? "" : `${r.relay} `}${String(r.rate).padStart(5)}/s ${
      r.target.padEnd(8)
    }`

/** Producer throughput with each NOTIFY setting, in alternating rounds. */
const producerThroughput = (url: string, opts: Options) =>
  Effect.gen(function*() {
    // Alternating rounds, so that drift (checkpoints, other load) hits every mode alike.
    const modes = [["withoutWakeup", false], ["withWakeup", true], [
      "withWakeupInTransaction",
      "in-transaction"
    ]] as const
    const totals = { withoutWakeup: [0, 0], withWakeup: [0, 0], withWakeupInTransaction: [0, 0] }
    for (let round = 0; round < opts.producerRounds; round++) {
      for (const [key, notify] of modes) {
        const [commits, seconds, notifications] = yield* saturated(url, notify, 4, opts.producerSeconds)
        totals[key][0]! += commits
        totals[key][1]! += seconds
        log(
          `  producers (4, saturated) notify=${String(notify)}: ${int(commits / seconds)} tx/s${
            notify === false ? "" : `, ${int(notifications / seconds)} notifications/s`
          }`
        )
      }
    }
    const tps = (key: keyof typeof totals) => Math.round(totals[key][0]! / totals[key][1]!)
    return {
      withWakeup: tps("withWakeup"),
      withoutWakeup: tps("withoutWakeup"),
      withWakeupInTransaction: tps("withWakeupInTransaction")
    }
  })

const describeStages = (s: StageSummary) =>
  Number.isNaN(s.waitP50Ms)
    // Producers publishing their own events: nothing was claimed.
    ? `p50/p99 ms: publish→confirmed ${ms(s.confirmP50Ms)}/${ms(s.confirmP99Ms)}`
    : `p50/p99 ms: commit→claimed ${ms(s.waitP50Ms)}/${ms(s.waitP99Ms)}, claimed→publish ${ms(s.prepareP50Ms)}/${
      ms(s.prepareP99Ms)
    }, ` +
      `publish→confirmed ${ms(s.confirmP50Ms)}/${ms(s.confirmP99Ms)}; claim SQL ${ms(s.claimSqlP50Ms)}/${
        ms(s.claimSqlP99Ms)
      }, ` +
      `settle SQL ${ms(s.settleSqlP50Ms)}/${ms(s.settleSqlP99Ms)}; ${s.eventsPerPublish} events per publish`

const latencyRow = (r: Run) => [
  int(r.events),
  ms(r.p50Ms),
  ms(r.p95Ms),
  ms(r.p99Ms),
  ms(r.maxMs),
  int(r.claimsPerSecond),
  `${Math.round(r.emptyClaims * 100)}%`,
  ms(r.eventLoopP99Ms)
]

/** Runs the latency benchmark against a fresh durable server (and a RabbitMQ broker for `--transport rabbitmq`). */
export const run = (opts: Options): Effect.Effect<Result, never, Scope.Scope> =>
  Effect.gen(function*() {
    const rabbitPlans = opts.transports.includes("rabbitmq")
    // Both servers start at once: RabbitMQ takes ~10 s to boot.
    const [server, broker] = yield* Effect.all([
      Pg.server,
      rabbitPlans ? Effect.map(Rabbit.broker, (b): Rabbit.BrokerInfo | undefined => b) : Effect.succeed(undefined)
    ], { concurrency: 2 })
    const started = performance.now()
    const loadBefore = os.loadavg()[0]!
    log(
      `latency: ${opts.relays} relays, ${opts.producers} producer fibers, ${opts.warmup} s warm-up + ${opts.duration} s per run`
    )
    const plans: Array<Plan> = []
    if (opts.transports.includes("memory")) {
      for (const rate of opts.rates.memory) {
        for (const wakeup of opts.wakeups.memory) plans.push({ transport: "memory", wakeup, rate })
      }
    }
    if (rabbitPlans) {
      for (const rate of opts.rates.rabbitmq) {
        for (const queue of opts.queues) {
          for (const relay of opts.relayKinds) {
            for (const wakeup of opts.wakeups.rabbitmq) {
              plans.push({ transport: "rabbitmq", wakeup, rate, queue, relay })
            }
          }
        }
      }
    }
    const runs: Array<Run> = []
    for (const plan of plans) {
      const { lagMs, runs: rs } = yield* paced(server.url, broker?.url, plan, opts)
      runs.push(...rs)
      for (const r of rs) {
        log(
          `  ${describeRun(r)}  p50 ${ms(r.p50Ms)} ms  p95 ${ms(r.p95Ms)} ms  p99 ${ms(r.p99Ms)} ms  (${
            int(r.events)
          } events, ${int(r.claimsPerSecond)} claims/s, event-loop delay p99 ${ms(r.eventLoopP99Ms)} ms)${
            lagMs > 100 ? `  producers up to ${int(lagMs)} ms behind schedule` : ""
          }`
        )
        if (r.transport === "rabbitmq" && r.stages !== undefined) log(`      ${describeStages(r.stages)}`)
      }
    }
    const producer = opts.transports.includes("memory") ? yield* producerThroughput(server.url, opts) : undefined

    const memoryRuns = runs.filter((r): r is MemoryRun => r.transport === "memory")
    const rabbitRuns = runs.filter((r): r is RabbitRun => r.transport === "rabbitmq")
    const latencyHeaders = ["events", "p50 ms", "p95 ms", "p99 ms", "max ms", "claims/s", "empty", "loop p99"]
    if (memoryRuns.length > 0) {
      log("")
      log(
        `append-commit → publish latency (memory broker, ${opts.relays} relays, notify ${opts.notify}; PostgreSQL ${server.version}, fsync=${server.fsync})`
      )
      table(
        ["wakeup", "rate/s", "achieved/s", ...latencyHeaders],
        memoryRuns.map((r) => [r.wakeup, int(r.rate), int(r.achievedRate), ...latencyRow(r)])
      )
    }
    if (rabbitRuns.length > 0) {
      log("")
      log(
        `append-commit → RabbitMQ confirm / consumer latency (${opts.relays} relays, batch ${opts.batchSize}, ${opts.channels} confirm channel(s), wake-up ${
          opts.wakeups.rabbitmq.join("/")
        }; consumer concurrency ${opts.consumerConcurrency}, prefetch ${opts.prefetch}; RabbitMQ ${broker?.version}, PostgreSQL ${server.version})`
      )
      table(
        ["queue", "relay", "wakeup", "rate/s", "achieved/s", "target", ...latencyHeaders],
        rabbitRuns.map((
          r
        ) => [r.queue, r.relay, r.wakeup, int(r.rate), int(r.achievedRate), r.target, ...latencyRow(r)])
      )
    }
    if (producer !== undefined) {
      log("")
      const vs = (n: number) => {
        const change = 100 * (n / producer.withoutWakeup - 1)
        return `${change >= 0 ? "+" : "-"}${Math.abs(change).toFixed(0)}%`
      }
      log(
        `producers (4 fibers, one event per transaction, saturated, ${opts.producerRounds} × ${opts.producerSeconds} s each):`
      )
      table(["notify", "tx/s", "vs none"], [
        ["false (no wake-up)", int(producer.withoutWakeup), ""],
        ["true (coalesced, after commit)", int(producer.withWakeup), vs(producer.withWakeup)],
        ["\"in-transaction\"", int(producer.withWakeupInTransaction), vs(producer.withWakeupInTransaction)]
      ])
    }
    log(
      `total ${secs((performance.now() - started) / 1000)} s; load average ${loadBefore.toFixed(1)} before, ${
        os.loadavg()[0]!.toFixed(1)
      } after (${os.cpus().length} cores)`
    )
    return {
      runs,
      ...(producer === undefined ? {} : { producer }),
      meta: {
        relays: opts.relays,
        producers: opts.producers,
        batchSize: opts.batchSize,
        durationSeconds: opts.duration,
        warmupSeconds: opts.warmup,
        notify: opts.notify,
        quick: opts.quick,
        postgres: server.version,
        fsync: server.fsync,
        synchronousCommit: server.synchronousCommit,
        ...(broker === undefined ? {} : {
          rabbitmq: broker.version,
          confirmChannels: opts.channels,
          consumerConcurrency: opts.consumerConcurrency,
          prefetch: opts.prefetch
        }),
        node: process.version,
        // Other work on the machine skews every number here: the 1-minute load average before and after.
        loadAverage: [round(loadBefore, 2), round(os.loadavg()[0]!, 2)],
        cpus: os.cpus().length
      }
    }
  })
