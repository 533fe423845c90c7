import { assert, describe, it } from "@effect/vitest"
import { InvalidConfig } from "@tidings/core/Errors"
import * as EventRegistry from "@tidings/core/EventRegistry"
import * as Publisher from "@tidings/core/Publisher"
import * as Settings from "@tidings/core/Settings"
import { ConfigProvider, Effect, Exit, Layer } from "effect"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import * as AmqpConsumer from "../src/AmqpConsumer.ts"
import * as AmqpPublisher from "../src/AmqpPublisher.ts"
import * as Topology from "../src/Topology.ts"
import { amqpUrl, fastReconnect, OrderPlaced, unique } from "./helpers.ts"

const env = (vars: Record<string, string>) => ConfigProvider.layer(ConfigProvider.fromEnv({ env: vars }))

const invalidOf = <A, E>(exit: Exit.Exit<A, E>): InvalidConfig => {
  assert.isTrue(Exit.isFailure(exit))
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined
  assert.instanceOf(error, InvalidConfig)
  return error as InvalidConfig
}

describe("RabbitMQ settings from the environment", () => {
  it.live("AmqpConnection and AmqpPublisher from TIDINGS_AMQP_* and TIDINGS_EXCHANGE", () =>
    Effect.gen(function*() {
      const exchange = unique("env.x")
      const connection = AmqpConnection.layerConfig({
        defaults: {
          reconnect: fastReconnect,
          topology: Topology.make({ exchanges: [{ name: exchange, type: "topic", autoDelete: true }] })
        }
      })
      const app = AmqpPublisher.layerConfig().pipe(
        Layer.provideMerge(connection),
        Layer.provide(
          env({
            TIDINGS_AMQP_URL: amqpUrl(),
            TIDINGS_AMQP_NAME: "env-test",
            TIDINGS_AMQP_HEARTBEAT: "5 seconds",
            TIDINGS_EXCHANGE: exchange,
            TIDINGS_PUBLISHER_UNROUTABLE: "fail"
          })
        )
      )
      yield* Effect.gen(function*() {
        const c = yield* AmqpConnection.AmqpConnection
        assert.isTrue(yield* c.isReady)
        assert.notInclude(c.description, "guest:")
        // Nothing is bound to the exchange and unroutable is "fail" (from the environment): a non-retryable rejection.
        const [result] = yield* Publisher.Publisher.use((p) =>
          p.publish([{
            id: crypto.randomUUID(),
            type: "order.placed",
            version: 1,
            aggregateType: "order",
            aggregateId: "o",
            orderingKey: "o",
            payload: {},
            headers: {},
            occurredAt: new Date()
          }])
        )
        assert.strictEqual(result?._tag, "Rejected")
        assert.isFalse(result?._tag === "Rejected" && result.error.isRetryable)
      }).pipe(Effect.provide(app))
    }))

  it.effect("every wrong variable at once, by name; the URL's password never shows", () =>
    Effect.gen(function*() {
      const vars = env({
        TIDINGS_AMQP_URL: "http://guest:Hidden-Pa55@127.0.0.1",
        TIDINGS_AMQP_HEARTBEAT: "often",
        TIDINGS_PUBLISHER_CHANNELS: "0",
        TIDINGS_CONSUMER_BILLING_CONCURRENCY: "0",
        TIDINGS_CONSUMER_BILLING_RETRY: "sometimes"
      })
      const error = invalidOf(
        yield* Effect.exit(
          Settings.all({
            connection: Settings.read(AmqpConnection.environment),
            publisher: Settings.read(AmqpPublisher.environment),
            consumer: Settings.read(AmqpConsumer.environment, {
              prefix: "TIDINGS_CONSUMER_BILLING",
              defaults: { name: "billing" }
            })
          }).pipe(Effect.provide(vars))
        )
      )
      assert.deepStrictEqual(error.issues!.map((i) => i.path), [
        "TIDINGS_AMQP_URL",
        "TIDINGS_AMQP_HEARTBEAT",
        "TIDINGS_EXCHANGE",
        "TIDINGS_PUBLISHER_CHANNELS",
        "TIDINGS_CONSUMER_BILLING_CONCURRENCY",
        "TIDINGS_CONSUMER_BILLING_RETRY"
      ])
      assert.notInclude(error.message, "Hidden-Pa55")
      // A consumer's layer reads under TIDINGS_CONSUMER_<NAME> and fails before touching the broker.
      const consumer = AmqpConsumer.layerConfig({
        name: "billing",
        queue: "billing",
        registry: EventRegistry.make([OrderPlaced]),
        handler: () => Effect.void
      })
      const built = yield* Effect.exit(
        Layer.build(consumer).pipe(
          Effect.scoped,
          Effect.provide(vars),
          Effect.provideService(AmqpConnection.AmqpConnection, undefined as unknown as AmqpConnection.Service)
        )
      )
      assert.deepStrictEqual(invalidOf(built).issues!.map((i) => i.path), [
        "TIDINGS_CONSUMER_BILLING_CONCURRENCY",
        "TIDINGS_CONSUMER_BILLING_RETRY"
      ])
    }))
})
