/**
 * The broker topology every process declares (identically, so any of them may declare it first):
 * the events exchange, the consumers' quorum queue with its retry and dead-letter queues, and an
 * audit queue bound to the same exchange that nobody consumes during the run. At the end the harness
 * reads the audit queue: it holds one copy of every message the broker confirmed, which tells a
 * message lost after publishing from one never published, and shows anything published for a
 * rolled-back transaction.
 * @module
 */
import { Topology } from "@tidings/rabbitmq"

export const exchange = "chaos.events"
export const auditQueue = "chaos.audit"

/** The consumers' queue (quorum, delivery limit 20) with retry queues and `chaos.effects.dlq`. */
export const consumerQueue = Topology.consumerQueue({
  queue: "chaos.effects",
  exchange: { name: exchange, type: "topic" },
  retryDelays: ["1 second", "5 seconds", "15 seconds"]
})

/** Everything, including the audit queue. */
export const topology: Topology.Topology = Topology.merge(
  consumerQueue.topology,
  Topology.make({
    queues: [{ name: auditQueue, type: "quorum" }],
    bindings: [{ exchange, queue: auditQueue, routingKey: "#" }]
  })
)

/** Queues whose messages are still on their way to a consumer. */
export const inFlightQueues: ReadonlyArray<string> = [
  consumerQueue.queue,
  ...consumerQueue.retryQueues.map((q) => q.name)
]
