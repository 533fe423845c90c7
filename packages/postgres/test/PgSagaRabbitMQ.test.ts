/**
 * The asynchronous saga over RabbitMQ: commands and replies go through the outbox, the relay and
 * a confirmed AMQP publisher to quorum queues; the participants and the orchestrator are AMQP
 * consumers. Runs to completion, and with a failing participant to `compensated`.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Relay from "@tidings/core/Relay"
import * as Saga from "@tidings/core/Saga"
import * as AmqpConsumer from "@tidings/rabbitmq/AmqpConsumer"
import * as AmqpPublisher from "@tidings/rabbitmq/AmqpPublisher"
import * as EventRegistry from "@tidings/rabbitmq/EventRegistry"
import * as Topology from "@tidings/rabbitmq/Topology"
import { Effect, Layer, Option } from "effect"
import { freshSchema, pgClientLayer } from "../../../test/support/pg.ts"
import { Charge, commandOrder, Confirm, Refund, Release, Reserve } from "../../core/test/SagaFixtures.ts"
import { connectionLayer, rawChannel, unique } from "../../rabbitmq/test/helpers.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"
import * as PgSagaStore from "../src/PgSagaStore.ts"
import { orderScenario, participantTables, participate } from "./fixtures/sagaParticipants.ts"

/** A delivery as sagas read it. */
const received = (d: AmqpConsumer.Delivery<EventRegistry.Decoded>): Saga.Received => ({
  id: d.messageId,
  type: d.event.type,
  payload: d.event.payload,
  headers: d.headers
})

/** Participants and orchestrator as AMQP consumers, the relay publishing to RabbitMQ, then the scenario. */
const scenario = (schema: string) =>
  Effect.gen(function*() {
    yield* participantTables(schema)
    const exchange = unique("saga.x")
    const queue = (name: string, routingKeys: ReadonlyArray<string>) =>
      Topology.consumerQueue({
        queue: unique(name),
        exchange: { name: exchange, autoDelete: true },
        routingKeys,
        retryDelays: ["200 millis"]
      })
    const participantsQueue = queue("saga.participants", ["inventory.#", "payment.#", "order.#"])
    const orchestratorQueue = queue("saga.orchestrator", [Saga.ReplyEvent.type])
    const raw = yield* rawChannel()
    yield* Effect.addFinalizer(() =>
      Effect.promise(async () => {
        for (const cq of [participantsQueue, orchestratorQueue]) {
          for (const q of cq.topology.queues) await raw.deleteQueue(q.name).catch(() => undefined)
          await raw.deleteExchange(cq.deadLetterExchange).catch(() => undefined)
        }
      })
    )

    const definition = commandOrder()
    const registry = Saga.registry(definition)
    const outcomes: Array<Saga.ReplyOutcome> = []
    const participants = AmqpConsumer.layer({
      name: "saga-participants",
      queue: participantsQueue,
      registry: EventRegistry.make([Reserve, Charge, Confirm, Release, Refund]),
      handler: (d) =>
        Option.match(Saga.commandOf(received(d)), {
          onNone: () => Effect.void,
          onSome: (command) => participate(schema, command)
        })
    })
    const orchestrator = AmqpConsumer.layer({
      name: "saga-orchestrator",
      queue: orchestratorQueue,
      registry: EventRegistry.make([Saga.ReplyEvent]),
      handler: (d) => Effect.map(Saga.handleReply(registry, received(d)), (outcome) => void outcomes.push(outcome))
    })
    const relay = Relay.layer({
      statsInterval: false,
      retention: false,
      pollInterval: { base: "20 millis", max: "100 millis" }
    }).pipe(
      Layer.provide(AmqpPublisher.layer({ exchange }))
    )
    yield* Layer.build(Layer.mergeAll(participants, orchestrator, relay).pipe(Layer.provide(connectionLayer())))
    yield* orderScenario(schema, definition, outcomes)
    assert.isAtLeast(outcomes.length, 15)
  })

describe("Saga.start over RabbitMQ", () => {
  it.live("sagas run to completion, and with a failing participant to compensated", () =>
    Effect.scoped(Effect.gen(function*() {
      const schema = yield* freshSchema("sagamq")
      return yield* scenario(schema).pipe(
        Effect.provide(Layer.mergeAll(PgSagaStore.layer({ schema }), PgOutboxStore.layer({ schema })))
      )
    })).pipe(Effect.provide(pgClientLayer())))
})
