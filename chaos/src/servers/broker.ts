/**
 * The run's RabbitMQ: always a private node (the harness stops and starts it, so a shared broker
 * from TIDINGS_AMQP_URL will not do), started by the test support's `startRabbit`, which installs
 * Debian's rabbitmq-server when it is missing and the harness runs as root.
 * @module
 */
import { type RabbitControl, startRabbit } from "../../../test/support/rabbitmq.ts"

/** A running node with its control. */
export interface Broker {
  readonly url: string
  readonly control: RabbitControl
  readonly stop: () => Promise<void>
}

/** Starts a private node named `tidings-chaos-…`. */
export const start = async (): Promise<Broker> => {
  const rabbit = await startRabbit({ private: true, name: "tidings-chaos" })
  if (rabbit.control === undefined) {
    await rabbit.stop()
    throw new Error("the private RabbitMQ node has no control (rabbitmqctl)")
  }
  return { url: rabbit.url, control: rabbit.control, stop: rabbit.stop }
}
