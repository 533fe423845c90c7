/**
 * Tidings on RabbitMQ: a self-healing connection, declarative topology, a confirmed `Publisher` for
 * the relay, and consumers with versioned decoding and an overridable ack / retry / dead-letter table.
 * @module
 */
export * as AmqpConnection from "./AmqpConnection.ts"
export * as AmqpConsumer from "./AmqpConsumer.ts"
export * as AmqpErrors from "./AmqpErrors.ts"
export * as AmqpPublisher from "./AmqpPublisher.ts"
export * as EventRegistry from "./EventRegistry.ts"
export * as Topology from "./Topology.ts"
