/**
 * The consumer of the recipe (docs/recipes/rabbitmq-consumer.md): the billing service charges each
 * placed order once, however often RabbitMQ delivers it. Public API only.
 */
import { Event, Inbox } from "@tidings/core"
import { PgClient, PgInboxStore } from "@tidings/postgres"
import { AmqpConnection, AmqpConsumer, EventRegistry, Topology } from "@tidings/rabbitmq"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"

/** The event, as the producer defined it (share the definition, or define the same name, version and schema). */
export const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String, totalCents: Schema.Int })
})

/** What the consumer decodes: a registry of the event types (and older versions with upcasters) it accepts. */
export const registry = EventRegistry.make([OrderPlaced])

/** The consumer's queue, bound to the exchange the relay publishes to, with retry and dead-letter queues. */
export const billingQueue = (prefix: string) =>
  Topology.consumerQueue({
    queue: `${prefix}.billing`,
    exchange: { name: `${prefix}.events` }, // declared with the queue (a topic exchange)
    routingKeys: ["order.*"],
    retryDelays: ["1 second", "10 seconds"]
  })

/**
 * The handler: an Effect per delivery. `delivery.event` is the decoded event (typed by the
 * registry); the handler's SQL runs in the transaction `Inbox.wrap` opens, so its writes and the
 * inbox row commit together. A typed error whose `isRetryable` is false is dead-lettered; others are
 * retried through the retry queues.
 */
export const charge =
  (schema: string) => (delivery: AmqpConsumer.Delivery<EventRegistry.DecodedOf<typeof OrderPlaced>>) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const { orderId, totalCents } = delivery.event.payload
      yield* sql`INSERT INTO ${sql(schema)}.charges (order_id, cents) VALUES (${orderId}, ${totalCents})`
    })

/** Settings of {@link layer}. */
export interface Settings {
  readonly pgUrl: string
  readonly amqpUrl: string
  readonly schema: string
  readonly prefix: string
}

/**
 * The consumer as a Layer. The order: `AmqpConsumer.layer` needs an `AmqpConnection`, and its
 * handler needs what `Inbox.wrap` needs (an `InboxStore`) and what the handler needs (`SqlClient`);
 * `PgInboxStore.layer` needs the `SqlClient` too, so the client is provided last, to both.
 */
export const layer = (settings: Settings) => {
  const queue = billingQueue(settings.prefix)
  return AmqpConsumer.layer({
    name: "billing",
    queue,
    registry,
    handler: Inbox.wrap("billing", charge(settings.schema)),
    concurrency: 8
  }).pipe(
    Layer.provide(PgInboxStore.layer({ schema: settings.schema })),
    Layer.provide(AmqpConnection.layer({ url: settings.amqpUrl, name: "billing-consumer", topology: queue.topology })),
    Layer.provideMerge(PgClient.layer({ url: settings.pgUrl }))
  )
}
