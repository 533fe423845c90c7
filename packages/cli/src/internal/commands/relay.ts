/**
 * `tidings relay`: a standalone relay worker, the deployable unit: it publishes the schema's outbox
 * to a RabbitMQ exchange until SIGTERM / SIGINT, woken by the producers' NOTIFY
 * (`PgOutboxStore.layer({ notify: true })`) or by polling, and shuts down gracefully.
 */
import * as Relay from "@tidings/core/Relay"
import * as Settings from "@tidings/core/Settings"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as PgWakeup from "@tidings/postgres/PgWakeup"
import * as AmqpPublisher from "@tidings/rabbitmq/AmqpPublisher"
import * as Topology from "@tidings/rabbitmq/Topology"
import { Effect, Layer, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as Out from "../output.ts"
import { brokerLayer, databaseLayer, read, settings } from "../root.ts"

const text = <A>(option: Option.Option<A>) => Option.match(option, { onNone: () => undefined, onSome: String })

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
  ordering: Flag.Literals("ordering", ["unordered", "per-key"] as const).pipe(
    Flag.optional,
    Flag.withDescription(
      "per-key publishes each ordering key in order (default: TIDINGS_RELAY_ORDERING, else unordered)"
    )
  ),
  maxAttempts: Flag.Int("max-attempts").pipe(
    Flag.optional,
    Flag.withDescription("Attempts before an event is failed (default: TIDINGS_RELAY_MAX_ATTEMPTS, else 10)")
  )
}, (f) =>
  Effect.gen(function*() {
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
    Command.withDescription("Runs a relay worker: publishes the schema's outbox to a RabbitMQ exchange until stopped")
  )
