/**
 * `tidings relay`: a standalone relay worker, the deployable unit: it publishes the schema's outbox
 * (`--mode row`, `Relay`) or its log (`--mode log`, `LogRelay`, a member of `--group`) to a RabbitMQ
 * exchange until SIGTERM / SIGINT, woken by the producers' NOTIFY (`notify: true` on their store) or
 * by polling, and shuts down gracefully.
 */
import * as LogRelay from "@tidings/core/LogRelay"
import { LogStore } from "@tidings/core/LogStore"
import * as Relay from "@tidings/core/Relay"
import * as Settings from "@tidings/core/Settings"
import * as PgLogStore from "@tidings/postgres/PgLogStore"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as PgWakeup from "@tidings/postgres/PgWakeup"
import * as AmqpPublisher from "@tidings/rabbitmq/AmqpPublisher"
import * as Topology from "@tidings/rabbitmq/Topology"
import { Context, Effect, Layer, Option, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import * as Out from "../output.ts"
import { brokerLayer, databaseLayer, read, SettingError, settings } from "../root.ts"

const text = <A>(option: Option.Option<A>) => Option.match(option, { onNone: () => undefined, onSome: String })

/** `TIDINGS_RELAY_MODE`: which relay runs (the other settings are read by that relay's own rules). */
const modeEnvironment: Settings.Environment<
  Schema.Struct<{ readonly mode: Schema.withDecodingDefault<Schema.Literals<readonly ["row", "log"]>> }>
> = {
  component: "tidings relay",
  schema: Schema.Struct({
    mode: Schema.Literals(["row", "log"]).pipe(Schema.withDecodingDefault(Effect.succeed<"row" | "log">("row")))
  }),
  prefix: "TIDINGS_RELAY"
}

/** `tidings relay` */
export const command = Command.make("relay", {
  exchange: Flag.String("exchange").pipe(
    Flag.optional,
    Flag.withDescription(
      "The exchange events are published to (default: TIDINGS_EXCHANGE); declared (topic, durable) when missing"
    )
  ),
  concurrency: Flag.Int("concurrency").pipe(
    Flag.optional,
    Flag.withDescription("Pollers (default: TIDINGS_RELAY_CONCURRENCY, else 2)")
  ),
  batchSize: Flag.Int("batch-size").pipe(
    Flag.optional,
    Flag.withDescription("Events per claim (default: TIDINGS_RELAY_BATCH_SIZE, else 100)")
  ),
  mode: Flag.Literals("mode", ["row", "log"] as const).pipe(
    Flag.optional,
    Flag.withDescription(
      "row: the per-row relay over the outbox table; log: a log relay group member over the log (default: TIDINGS_RELAY_MODE, else row)"
    )
  ),
  group: Flag.String("group").pipe(
    Flag.optional,
    Flag.withDescription("Log mode: the relay group its instances share (default: TIDINGS_LOG_RELAY_GROUP, else relay)")
  ),
  ordering: Flag.Literals("ordering", ["unordered", "per-key"] as const).pipe(
    Flag.optional,
    Flag.withDescription(
      "Row mode: per-key publishes each ordering key in order (default: TIDINGS_RELAY_ORDERING, else unordered); log mode is always in order per partition"
    )
  ),
  maxAttempts: Flag.Int("max-attempts").pipe(
    Flag.optional,
    Flag.withDescription("Attempts before an event is failed (default: TIDINGS_RELAY_MAX_ATTEMPTS, else 10)")
  )
}, (f) =>
  Effect.gen(function*() {
    const { mode } = yield* read(Settings.read(modeEnvironment), { TIDINGS_RELAY_MODE: text(f.mode) }, [[
      "TIDINGS_RELAY_MODE",
      "--mode"
    ]])
    if (mode === "log") return yield* logRelay(f)
    if (Option.isSome(f.group)) {
      return yield* new SettingError({ message: "--group is a log mode setting: add --mode log" })
    }
    const s = yield* settings
    // The flags win over the TIDINGS_* variables, which win over the defaults here.
    const config = yield* read(
      Settings.all({
        relay: Relay.config({ defaults: { concurrency: 2, name: "tidings-relay" } }),
        publisher: Settings.read(AmqpPublisher.environment),
        outbox: Settings.read(PgOutboxStore.environment)
      }),
      {
        TIDINGS_EXCHANGE: text(f.exchange),
        TIDINGS_RELAY_CONCURRENCY: text(f.concurrency),
        TIDINGS_RELAY_BATCH_SIZE: text(f.batchSize),
        TIDINGS_RELAY_ORDERING: text(f.ordering),
        TIDINGS_RELAY_MAX_ATTEMPTS: text(f.maxAttempts)
      },
      [
        ["TIDINGS_EXCHANGE", "--exchange"],
        ["TIDINGS_RELAY_CONCURRENCY", "--concurrency"],
        ["TIDINGS_RELAY_BATCH_SIZE", "--batch-size"],
        ["TIDINGS_RELAY_ORDERING", "--ordering"],
        ["TIDINGS_RELAY_MAX_ATTEMPTS", "--max-attempts"]
      ]
    )
    const { schema } = config.outbox
    const exchange = config.publisher.exchange
    const database = databaseLayer
    const broker = brokerLayer("tidings-relay", Topology.make({ exchanges: [{ name: exchange }] }))
    const worker = Relay.layer(config.relay).pipe(
      Layer.provideMerge(
        Layer.mergeAll(
          PgOutboxStore.layer(config.outbox),
          AmqpPublisher.layer(config.publisher).pipe(Layer.provide(broker)),
          PgWakeup.layer({ schema })
        )
      ),
      Layer.provide(database)
    )
    const concurrency = config.relay.concurrency ?? 1
    const ordering = config.relay.ordering ?? "unordered"
    yield* Effect.scoped(Effect.gen(function*() {
      yield* Layer.build(worker)
      const started = { schema, exchange, concurrency, ordering }
      if (s.json) yield* Out.json({ event: "started", ...started })
      else {yield* Out.line(
          `relay running: schema ${schema} → exchange ${exchange} (${concurrency} pollers, ${ordering}); Ctrl-C stops (or SIGTERM)`
        )}
      // Until interrupted (the signal): closing the scope stops claiming and lets in-flight batches finish.
      return yield* Effect.never
    })).pipe(Effect.onInterrupt(() => s.json ? Out.json({ event: "stopped" }) : Out.line("relay stopped")))
  })).pipe(
    Command.withDescription(
      "Runs a relay worker: publishes the schema's outbox (or, with --mode log, its log) to a RabbitMQ exchange until stopped"
    )
  )

/** `tidings relay --mode log`: a member of a log relay group. */
const logRelay = (f: {
  readonly exchange: Option.Option<string>
  readonly group: Option.Option<string>
  readonly concurrency: Option.Option<number>
  readonly batchSize: Option.Option<number>
  readonly ordering: Option.Option<string>
  readonly maxAttempts: Option.Option<number>
}) =>
  Effect.gen(function*() {
    if (Option.isSome(f.ordering)) {
      return yield* new SettingError({
        message: "--ordering is a row mode setting: log mode publishes each partition in order"
      })
    }
    const s = yield* settings
    const config = yield* read(
      Settings.all({
        relay: LogRelay.config({ defaults: { concurrency: 2 } }),
        publisher: Settings.read(AmqpPublisher.environment),
        log: Settings.read(PgLogStore.environment)
      }),
      {
        TIDINGS_EXCHANGE: text(f.exchange),
        TIDINGS_LOG_RELAY_GROUP: text(f.group),
        TIDINGS_LOG_RELAY_CONCURRENCY: text(f.concurrency),
        TIDINGS_LOG_RELAY_BATCH_SIZE: text(f.batchSize),
        TIDINGS_LOG_RELAY_MAX_ATTEMPTS: text(f.maxAttempts)
      },
      [
        ["TIDINGS_EXCHANGE", "--exchange"],
        ["TIDINGS_LOG_RELAY_GROUP", "--group"],
        ["TIDINGS_LOG_RELAY_CONCURRENCY", "--concurrency"],
        ["TIDINGS_LOG_RELAY_BATCH_SIZE", "--batch-size"],
        ["TIDINGS_LOG_RELAY_MAX_ATTEMPTS", "--max-attempts"]
      ]
    )
    const { schema } = config.log
    const exchange = config.publisher.exchange
    const broker = brokerLayer("tidings-relay", Topology.make({ exchanges: [{ name: exchange }] }))
    const worker = LogRelay.layer(config.relay).pipe(
      Layer.provideMerge(
        Layer.mergeAll(
          PgLogStore.layer(config.log),
          AmqpPublisher.layer(config.publisher).pipe(Layer.provide(broker)),
          PgWakeup.layer({ schema })
        )
      ),
      Layer.provide(databaseLayer)
    )
    yield* Effect.scoped(Effect.gen(function*() {
      const context = yield* Layer.build(worker)
      const relay = Context.get(context, LogRelay.LogRelay)
      const started = {
        schema,
        exchange,
        mode: "log",
        group: relay.settings.group,
        concurrency: relay.settings.concurrency,
        partitions: Context.get(context, LogStore).partitions
      }
      if (s.json) yield* Out.json({ event: "started", ...started })
      else {
        yield* Out.line(
          `relay running: schema ${schema} log → exchange ${exchange} (log mode, group ${started.group}, ${started.concurrency} workers, ${started.partitions} partitions); Ctrl-C stops (or SIGTERM)`
        )
      }
      return yield* Effect.never
    })).pipe(Effect.onInterrupt(() => s.json ? Out.json({ event: "stopped" }) : Out.line("relay stopped")))
  })
