/**
 * `tidings relay`: a standalone relay worker, the deployable unit: it publishes the schema's outbox
 * to a RabbitMQ exchange until SIGTERM / SIGINT, woken by the producers' NOTIFY
 * (`PgOutboxStore.layer({ notify: true })`) or by polling, and shuts down gracefully.
 */
import * as Relay from "@tidings/core/Relay"
import * as AmqpPublisher from "@tidings/rabbitmq/AmqpPublisher"
import * as Topology from "@tidings/rabbitmq/Topology"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import * as PgWakeup from "@tidings/postgres/PgWakeup"
import { Config, Effect, Layer } from "effect"
import { Command, Flag } from "effect/cli"
import * as Out from "../output.ts"
import { brokerLayer, databaseLayer, schemaName, settings } from "../root.ts"

/** `tidings relay` */
export const command = Command.make("relay", {
  exchange: Flag.String("exchange").pipe(Flag.withFallbackConfig(Config.String("TIDINGS_EXCHANGE")), Flag.withDescription("The exchange events are published to (default: TIDINGS_EXCHANGE); declared (topic, durable) when missing")),
  concurrency: Flag.Int("concurrency").pipe(Flag.withDefault(2), Flag.withDescription("Pollers")),
  batchSize: Flag.Int("batch-size").pipe(Flag.withDefault(100), Flag.withDescription("Events per claim")),
  ordering: Flag.Literals("ordering", ["unordered", "per-key"] as const).pipe(Flag.withDefault("unordered" as const), Flag.withDescription("per-key publishes each ordering key in order")),
  maxAttempts: Flag.Int("max-attempts").pipe(Flag.withDefault(10), Flag.withDescription("Attempts before an event is failed"))
}, (f) =>
  Effect.gen(function*() {
    const s = yield* settings
    const schema = yield* schemaName
    const database = databaseLayer
    const broker = brokerLayer("tidings-relay", Topology.make({ exchanges: [{ name: f.exchange }] }))
    const worker = Relay.layer({ concurrency: f.concurrency, batchSize: f.batchSize, ordering: f.ordering, maxAttempts: f.maxAttempts, name: "tidings-relay" }).pipe(
      Layer.provideMerge(Layer.mergeAll(PgOutboxStore.layer({ schema }), AmqpPublisher.layer({ exchange: f.exchange }).pipe(Layer.provide(broker)), PgWakeup.layer({ schema }))),
      Layer.provide(database)
    )
    yield* Effect.scoped(Effect.gen(function*() {
      yield* Layer.build(worker)
      const started = { schema, exchange: f.exchange, concurrency: f.concurrency, ordering: f.ordering }
      if (s.json) yield* Out.json({ event: "started", ...started })
      else yield* Out.line(`relay running: schema ${schema} → exchange ${f.exchange} (${f.concurrency} pollers, ${f.ordering}); Ctrl-C stops (or SIGTERM)`)
      // Until interrupted (the signal): closing the scope stops claiming and lets in-flight batches finish.
      return yield* Effect.never
    })).pipe(Effect.onInterrupt(() => s.json ? Out.json({ event: "stopped" }) : Out.line("relay stopped")))
  })).pipe(Command.withDescription("Runs a relay worker: publishes the schema's outbox to a RabbitMQ exchange until stopped"))
