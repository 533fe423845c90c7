/**
 * The harness's own broker access (plain amqplib, a fresh connection per use, since the broker is
 * stopped and started under it): declaring the topology before the workers start, publishing the
 * malformed messages, queue depths for the drain, and reading the dead-letter and audit queues out at
 * the end.
 * @module
 */
import { Topology as Declare } from "@tidings/rabbitmq"
import * as amqp from "amqplib"
import type { ChannelModel, ConsumeMessage } from "amqplib"
import { Effect } from "effect"
import * as Topology from "./topology.ts"

/** Runs `f` on a fresh connection, closed afterwards. */
export const withConnection = async <A>(url: string, f: (model: ChannelModel) => Promise<A>): Promise<A> => {
  const model = await amqp.connect(url, { noDelay: true })
  model.on("error", () => undefined)
  try {
    return await f(model)
  } finally {
    await model.close().catch(() => undefined)
  }
}

/** Declares the run's topology (exchange, consumer queue with retry and dead-letter queues, audit queue). */
export const declare = (url: string): Promise<void> =>
  withConnection(url, async (model) => {
    const channel = await model.createChannel()
    await Effect.runPromise(Declare.apply(channel, Topology.topology))
  })

/** Ready messages in each queue (a queue that cannot be checked counts as unknown: -1). */
export const depths = (url: string, queues: ReadonlyArray<string>): Promise<Record<string, number>> =>
  withConnection(url, async (model) => {
    const out: Record<string, number> = {}
    for (const queue of queues) {
      const channel = await model.createChannel()
      channel.on("error", () => undefined)
      out[queue] = await channel.checkQueue(queue).then((q) => q.messageCount, () => -1)
      await channel.close().catch(() => undefined)
    }
    return out
  })

/** A message to publish as it is, on a confirm channel. */
export interface Raw {
  readonly exchange: string
  readonly routingKey: string
  readonly content: Buffer
  readonly options: amqp.Options.Publish
}

/** Publishes and waits for the broker's confirms. */
export const publishConfirmed = (url: string, messages: ReadonlyArray<Raw>): Promise<void> =>
  withConnection(url, async (model) => {
    const channel = await model.createConfirmChannel()
    for (const m of messages) channel.publish(m.exchange, m.routingKey, m.content, m.options)
    await channel.waitForConfirms()
  })

/** What {@link takeAll} got, and how many the queue held when it started. */
export interface Taken {
  readonly messages: Array<ConsumeMessage>
  readonly held: number
}

/**
 * Takes every message out of `queue` (acknowledging it), until as many as it held when we started
 * have arrived, or nothing arrived for `idleMs`. Run when nothing publishes to it any more.
 */
export const takeAll = (url: string, queue: string, idleMs = 5000): Promise<Taken> =>
  withConnection(url, async (model) => {
    const channel = await model.createChannel()
    const { messageCount } = await channel.checkQueue(queue)
    const messages: Array<ConsumeMessage> = []
    if (messageCount === 0) return { messages, held: 0 }
    await channel.prefetch(1000)
    await new Promise<void>((resolve) => {
      let idle = setTimeout(resolve, idleMs)
      void channel.consume(queue, (message) => {
        if (message === null) return resolve()
        messages.push(message)
        channel.ack(message)
        clearTimeout(idle)
        if (messages.length >= messageCount) return resolve()
        idle = setTimeout(resolve, idleMs)
      })
    })
    return { messages, held: messageCount }
  })
