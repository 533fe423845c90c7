/**
 * What every worker reads from its environment (set by the harness) and the layers they share: the
 * Postgres client (with an `application_name` the harness targets with `pg_terminate_backend`) and
 * the broker connection with the run's topology. Library defaults everywhere else, as an adopting
 * team would start: only the lease is shortened, so that SIGSTOP pauses past it stay short.
 * @module
 */
import { PgClient } from "@tidings/postgres"
import { AmqpConnection, AmqpPublisher } from "@tidings/rabbitmq"
import { Duration, Layer, Redacted } from "effect"
import * as Tables from "../tables.ts"
import * as Topology from "../topology.ts"
import { env } from "./lifecycle.ts"

/** This process's name in the run (`relay-1`, `consumer-2`, ...). */
export const name = env("CHAOS_NAME")
/** How many times this name was started before (0 for the first start). */
export const incarnation = Number(env("CHAOS_INCARNATION"))
export const pgUrl = Redacted.make(env("CHAOS_PG_URL"))
export const amqpUrl = Redacted.make(env("CHAOS_AMQP_URL"))
export const lease = Duration.seconds(Number(env("CHAOS_LEASE_SECONDS")))

/** Postgres for this worker. */
export const database = (maxConnections: number) =>
  PgClient.layer({ url: pgUrl, maxConnections, applicationName: `${Tables.workerApplicationPrefix}${name}` })

/** The broker connection, declaring the run's topology on every connect. */
export const broker = AmqpConnection.layer({ url: amqpUrl, name, topology: Topology.topology })

/**
 * The relay's publisher. Its confirm timeout stays below the relay's publish timeout (half the
 * lease), as `AmqpPublisher` asks.
 */
export const publisher = AmqpPublisher.layer({
  exchange: Topology.exchange,
  confirmTimeout: Duration.millis(Duration.toMillis(lease) * 0.4)
}).pipe(Layer.provide(broker))
