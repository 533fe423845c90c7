// The in-memory consumer's deliveries: topic-pattern bindings and the decoding of a queued message
// into core's `Consumer.Delivery` (with an `EventRegistry`, as on RabbitMQ).
import type * as Consumers from "../Consumer.ts"
import type * as ConsumerRunner from "../ConsumerRunner.ts"
import * as EventRegistry from "../EventRegistry.ts"
import type { Message } from "../Message.ts"

/**
 * Whether an event type matches a RabbitMQ topic pattern (`*` one word, `#` zero or more).
 * @since 0.1.0
 * @category combinators
 */
export const matches = (pattern: string, type: string): boolean => {
  const p = pattern.split(".")
  const w = type.split(".")
  const go = (i: number, j: number): boolean => {
    if (i === p.length) return j === w.length
    if (p[i] === "#") return go(i + 1, j) || (j < w.length && go(i, j + 1))
    if (j === w.length) return false
    return (p[i] === "*" || p[i] === w[j]) && go(i + 1, j + 1)
  }
  return go(0, 0)
}

/** A message in a memory consumer's queue, with the deliveries made so far. */
export interface Item {
  readonly message: Message
  readonly attempt: number
}

/** The delivery a handler gets (decoded with the registry, if any), or why it gets none. */
export const prepare = <A>(
  registry: EventRegistry.EventRegistry<A> | undefined,
  queue: string,
  item: Item
): ConsumerRunner.Prepared<A> => {
  const m = item.message
  const base = {
    messageId: m.id,
    id: m.id,
    type: m.type,
    headers: m.headers,
    attempt: item.attempt,
    redelivered: item.attempt > 1,
    aggregateType: m.aggregateType,
    aggregateId: m.aggregateId,
    orderingKey: m.orderingKey,
    occurredAt: m.occurredAt,
    queue,
    exchange: "",
    routingKey: m.type
  }
  const version = EventRegistry.parseVersion(m.version, m.type)
  if (version instanceof EventRegistry.DecodeError) return { _tag: "DecodeFailure", error: version }
  if (registry === undefined) {
    return { _tag: "Decoded", delivery: { ...base, version, payload: m.payload, event: m as A } }
  }
  const decoded = registry.decode(m.type, version, m.payload)
  if (decoded._tag === "UnknownType") return decoded
  if (decoded._tag === "Invalid") return { _tag: "DecodeFailure", error: decoded.error }
  const payload = (decoded.event as { readonly payload?: unknown }).payload
  const delivery: Consumers.Delivery<A> = { ...base, version, payload, event: decoded.event }
  return decoded.note === undefined ? { _tag: "Decoded", delivery } : { _tag: "Decoded", delivery, note: decoded.note }
}
