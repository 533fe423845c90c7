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

/** What both relays publish with: the exchange (declared when missing), and NOTIFY wake-ups. */
const publishing = (schema: string, publisher: AmqpPublisher.Config) =>
  Layer.mergeAll(
    AmqpPublisher.layer(publisher).pipe(
      Layer.provide(brokerLayer("tidings-relay", Topology.make({ exchanges: [{ name: publisher.exchange }] })))
    ),
    PgWakeup.layer({ schema })
  )

/**
 * Builds `worker`, says it started (`describe` gives the JSON fields and the line), and runs until
 * interrupted (the signal): closing the scope stops reading and lets in-flight batches finish.
 */
const runUntilStopped = <A, E, R>(
  worker: Layer.Layer<A, E, R>,
  describe: (context: Context.Context<A>) => { readonly fields: object; readonly line: string }
) =>
  Effect.gen(function*() {
    const s = yield* settings
    yield* Effect.scoped(Effect.gen(function*() {
      const { fields, line } = describe(yield* Layer.build(worker))
      if (s.json) yield* Out.json({ event: "started", ...fields })
      else yield* Out.line(`${line}; Ctrl-C stops (or SIGTERM)`)
      return yield* Effect.never
    })).pipe(Effect.onInterrupt(() => s.json ? Out.json({ event: "stopped" }) : Out.line("relay stopped")))
  })

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
    const worker = Relay.layer(config.relay).pipe(
      Layer.provideMerge(Layer.merge(PgOutboxStore.layer(config.outbox), publishing(schema, config.publisher))),
      Layer.provide(databaseLayer)
    )
    const concurrency = config.relay.concurrency ?? 1
    const ordering = config.relay.ordering ?? "unordered"
    yield* runUntilStopped(worker, () => ({
      fields: { schema, exchange, concurrency, ordering },
      line: `relay running: schema ${schema} → exchange ${exchange} (${concurrency} pollers, ${ordering})`
    }))
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
    const worker = LogRelay.layer(config.relay).pipe(
      Layer.provideMerge(Layer.merge(PgLogStore.layer(config.log), publishing(schema, config.publisher))),
      Layer.provide(databaseLayer)
    )
    yield* runUntilStopped(worker, (context) => {
      const { concurrency, group } = Context.get(context, LogRelay.LogRelay).settings
      const partitions = Context.get(context, LogStore).partitions
      return {
        fields: { schema, exchange, mode: "log", group, concurrency, partitions },
        line:
          `relay running: schema ${schema} log → exchange ${exchange} (log mode, group ${group}, ${concurrency} workers, ${partitions} partitions)`
      }
    })
  })
