/**
 * Event types: a name, a version and a payload schema. `Outbox.append` validates and encodes the
 * payload with the schema before anything is written.
 * @since 0.1.0
 * @module
 */
import type { Schema } from "effect"

/**
 * A declared event type: name, version, the aggregate it belongs to, and its payload schema.
 * @since 0.1.0
 * @category models
 */
export interface EventType<
  Type extends string = string,
  S extends Schema.Codec<any, any, never, never> = Schema.Codec<any, any, never, never>
> {
  readonly type: Type
  readonly version: number
  readonly aggregateType: string
  readonly schema: S
  /** A draft of this event, validated when appended. */
  readonly make: (input: EventInput<S["Type"]>) => EventDraft<EventType<Type, S>>
}

/**
 * What a caller gives to append one event.
 * @since 0.1.0
 * @category models
 */
export interface EventInput<Payload> {
  readonly aggregateId: string
  readonly payload: Payload
  /** Defaults to the aggregate id. */
  readonly orderingKey?: string
  readonly headers?: Readonly<Record<string, string>>
}

/**
 * An event of a known type, not yet validated or written.
 * @since 0.1.0
 * @category models
 */
export interface EventDraft<E extends EventType<string, any> = EventType<string, any>>
  extends EventInput<E["schema"]["Type"]>
{
  readonly eventType: E
}

/**
 * Declares an event type.
 *
 * @example
 * const OrderPlaced = Event.define("order.placed", {
 *   aggregateType: "order",
 *   schema: Schema.Struct({ orderId: Schema.String, totalCents: Schema.Int })
 * })
 * @since 0.1.0
 * @category constructors
 */
export const define = <const Type extends string, S extends Schema.Codec<any, any, never, never>>(
  type: Type,
  options: { readonly schema: S; readonly aggregateType: string; readonly version?: number }
): EventType<Type, S> => {
  const eventType: EventType<Type, S> = {
    type,
    version: options.version ?? 1,
    aggregateType: options.aggregateType,
    schema: options.schema,
    make: (input) => ({ ...input, eventType })
  }
  return eventType
}
