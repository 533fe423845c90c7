/**
 * Malformed messages, published straight onto the consumers' queue (the default exchange, routed
 * by the queue's name), as a buggy or hostile producer elsewhere would: a body that is not JSON, an
 * event type nobody registered, and a version header `"abc"`. Each must end in the dead-letter queue
 * and never produce an effect. Their message ids say what they are (`malformed-<kind>-<n>`); the
 * `"abc"` one carries a payload that would decode, so handling it by mistake leaves an effect row.
 * @module
 */
import { HeaderNames } from "@tidings/rabbitmq/AmqpPublisher"
import * as Amqp from "./amqp.ts"
import { OrderPlaced } from "./event.ts"
import * as Topology from "./topology.ts"

export const kinds = ["json", "type", "version"] as const
export type Kind = typeof kinds[number]

/** The id prefix of every malformed message (and of the order id in its payload). */
export const prefix = "malformed-"

/** The kind of a malformed message id, or undefined for any other id. */
export const kindOf = (id: string | undefined): Kind | undefined => {
  if (id === undefined || !id.startsWith(prefix)) return undefined
  const kind = id.slice(prefix.length).split("-")[0]
  return (kinds as ReadonlyArray<string>).includes(kind ?? "") ? kind as Kind : undefined
}

const message = (kind: Kind, n: number): Amqp.Raw => {
  const id = `${prefix}${kind}-${n}`
  const payload = Buffer.from(JSON.stringify({ orderId: id, producer: "malformed", seq: n }))
  const base = {
    messageId: id,
    persistent: true,
    contentType: "application/json",
    type: OrderPlaced.type,
    headers: { [HeaderNames.version]: OrderPlaced.version } as Record<string, unknown>
  }
  switch (kind) {
    case "json":
      return {
        exchange: "",
        routingKey: Topology.consumerQueue.queue,
        content: Buffer.from(`{"orderId": "${id}", `),
        options: base
      }
    case "type":
      return {
        exchange: "",
        routingKey: Topology.consumerQueue.queue,
        content: payload,
        options: { ...base, type: "chaos.no_such_event" }
      }
    case "version":
      return {
        exchange: "",
        routingKey: Topology.consumerQueue.queue,
        content: payload,
        options: { ...base, headers: { [HeaderNames.version]: "abc" } }
      }
  }
}

/** Publishes one malformed message of each kind, numbered `n`; resolves with their ids once confirmed. */
export const publish = async (url: string, n: number): Promise<Array<string>> => {
  const messages = kinds.map((kind) => message(kind, n))
  await Amqp.publishConfirmed(url, messages)
  return messages.map((m) => String(m.options.messageId))
}
