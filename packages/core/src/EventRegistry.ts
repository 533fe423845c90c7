/**
 * Decoding of received events by type and version, for every consumer (`MemoryBroker.consume`,
 * `@tidings/rabbitmq`'s `AmqpConsumer`). Each event type is registered with its current version
 * (`Event.define`) and upcasters from older versions: an older payload is decoded with its own
 * version's schema, then turned into the current payload. A version newer than the current one (a
 * producer deployed before this consumer) is decoded best-effort with the current schema.
 *
 * @example
 * const OrderPlacedV1 = Event.define("order.placed", { aggregateType: "order", schema: V1 })
 * const OrderPlaced = Event.define("order.placed", { aggregateType: "order", version: 2, schema: V2 })
 * const registry = EventRegistry.make([
 *   EventRegistry.entry(OrderPlaced, EventRegistry.upcast(OrderPlacedV1, (v1) => ({ ...v1, currency: "EUR" }))),
 *   ShipmentSent
 * ])
 * @since 0.1.0
 * @module
 */
import { type Cause, Exit, Schema } from "effect"
import * as Errors from "./Errors.ts"
import type { EventType } from "./Event.ts"
import * as Settings from "./Settings.ts"

/**
 * Why a delivery could not be decoded. `InvalidVersion`: the version header is present but not an
 * integer of at least 1.
 * @since 0.1.0
 * @category errors
 */
export const DecodeFailure: Schema.Literals<
  readonly ["TooLarge", "InvalidJson", "SchemaMismatch", "MissingType", "UnsupportedContentType", "InvalidVersion"]
> = Schema.Literals([
  "TooLarge",
  "InvalidJson",
  "SchemaMismatch",
  "MissingType",
  "UnsupportedContentType",
  "InvalidVersion"
])
/**
 * @since 0.1.0
 * @category errors
 */
export type DecodeFailure = typeof DecodeFailure.Type

const DecodeErrorBase: Schema.Class<
  DecodeError,
  Schema.TaggedStruct<"DecodeError", {
    readonly reason: typeof DecodeFailure
    readonly eventType: Schema.optional<Schema.String>
    readonly version: Schema.optional<Schema.Number>
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<DecodeError>()("DecodeError", {
  reason: DecodeFailure,
  eventType: Schema.optional(Schema.String),
  version: Schema.optional(Schema.Number),
  message: Schema.String
})

/**
 * A delivery that can never be decoded: a permanent failure, dead-lettered by default.
 * @since 0.1.0
 * @category errors
 */
export class DecodeError extends DecodeErrorBase {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * Turns a payload of an older version (decoded by that version's schema) into the current payload.
 * @since 0.1.0
 * @category models
 */
export interface Upcaster<Current> {
  readonly type: string
  readonly version: number
  readonly schema: Schema.Codec<any, any, never, never>
  readonly upcast: (payload: any) => Current
}

/**
 * An upcaster from the event type `from` (an older version) to the current payload.
 * @since 0.1.0
 * @category constructors
 */
export const upcast = <Old extends EventType<string, any>, Current>(
  from: Old,
  f: (payload: Old["schema"]["Type"]) => Current
): Upcaster<Current> => ({ type: from.type, version: from.version, schema: from.schema, upcast: f })

/**
 * A registered event type: its current version, schema and upcasters.
 * @since 0.1.0
 * @category models
 */
export interface Entry<T extends string = string, P = unknown> {
  readonly type: T
  readonly version: number
  readonly schema: Schema.Codec<P, any, never, never>
  readonly upcasters: ReadonlyArray<Upcaster<P>>
}

/**
 * Registers `current` with upcasters from its older versions.
 * @since 0.1.0
 * @category constructors
 */
export const entry = <E extends EventType<string, any>>(
  current: E,
  ...upcasters: ReadonlyArray<Upcaster<E["schema"]["Type"]>>
): Entry<E["type"], E["schema"]["Type"]> => ({
  type: current.type,
  version: current.version,
  schema: current.schema,
  upcasters
})

/**
 * A decoded event, always in the current version's shape.
 * @since 0.1.0
 * @category models
 */
export interface Decoded<T extends string = string, P = unknown> {
  readonly type: T
  /** The registered (current) version: what `payload` conforms to. */
  readonly version: number
  /** The version the producer published. */
  readonly receivedVersion: number
  readonly payload: P
}

/**
 * The decoded event of an entry (or of a bare event type).
 * @since 0.1.0
 * @category models
 */
export type DecodedOf<X> = X extends Entry<infer T, infer P> ? Decoded<T, P>
  : X extends EventType<infer T, infer S> ? Decoded<T, S["Type"]>
  : never

/**
 * Why an otherwise fine decode deserves a log line.
 * @since 0.1.0
 * @category models
 */
export type Note = "newer-version" | "unregistered-version"

/**
 * The result of {@link EventRegistry.decode}.
 * @since 0.1.0
 * @category models
 */
export type DecodeResult<A> =
  | { readonly _tag: "Decoded"; readonly event: A; readonly note?: Note }
  | { readonly _tag: "UnknownType"; readonly type: string }
  | { readonly _tag: "Invalid"; readonly error: DecodeError }

/**
 * A registry; `A` is the union of the decoded events.
 * @since 0.1.0
 * @category models
 */
export interface EventRegistry<A> {
  readonly types: ReadonlyArray<string>
  /**
   * Decodes a parsed JSON payload. `version` undefined (a producer that does not send it) is taken as
   * the current version.
   */
  readonly decode: (type: string, version: number | undefined, json: unknown) => DecodeResult<A>
}

/**
 * Reads a version header: `undefined` when absent (taken as the current version), the version when
 * it is an integer of at least 1 (a number, or a string of digits), otherwise an `InvalidVersion`
 * `DecodeError` (`"abc"`, `0`, `1.5`): such a delivery is dead-lettered, never guessed.
 * @since 0.1.0
 * @category decoding
 */
export const parseVersion = (value: unknown, eventType?: string): number | undefined | DecodeError => {
  if (value === undefined || value === null) return undefined
  const n = typeof value === "number"
    ? value
    : typeof value === "bigint"
    ? Number(value)
    : typeof value === "string" && /^\d{1,15}$/.test(value.trim())
    ? Number(value.trim())
    : NaN
  if (Number.isSafeInteger(n) && n >= 1) return n
  const shown = typeof value === "string" ? JSON.stringify(value.slice(0, 40)) : String(value).slice(0, 40)
  return new DecodeError({
    reason: "InvalidVersion",
    message: `version header ${shown} is not an integer >= 1`,
    ...(eventType === undefined ? {} : { eventType })
  })
}

const normalize = (x: Entry<any, any> | EventType<string, any>): Entry<string, unknown> =>
  "upcasters" in x ? x : { type: x.type, version: x.version, schema: x.schema, upcasters: [] }

const describe = (error: Schema.SchemaError) => {
  const text = error.message
  return text.length > 1000 ? `${text.slice(0, 1000)}...` : text
}

interface Compiled {
  readonly entry: Entry<string, unknown>
  readonly decodeCurrent: (u: unknown) => Exit.Exit<unknown, Schema.SchemaError>
  readonly older: ReadonlyMap<
    number,
    {
      readonly decode: (u: unknown) => Exit.Exit<unknown, Schema.SchemaError>
      readonly upcast: (p: unknown) => unknown
    }
  >
}

/**
 * Builds a registry. Throws `InvalidConfig` for a type registered twice or a misplaced upcaster.
 * @since 0.1.0
 * @category constructors
 */
export const make = <const Entries extends ReadonlyArray<Entry<any, any> | EventType<string, any>>>(
  entries: Entries
): EventRegistry<DecodedOf<Entries[number]>> => {
  const byType = new Map<string, Compiled>()
  const problems: Array<{ readonly path: string; readonly message: string }> = []
  for (const raw of entries) {
    const e = normalize(raw)
    if (byType.has(e.type)) {
      problems.push({ path: `registry.${e.type}`, message: "event type registered twice" })
      continue
    }
    const older = new Map<
      number,
      {
        readonly decode: (u: unknown) => Exit.Exit<unknown, Schema.SchemaError>
        readonly upcast: (p: unknown) => unknown
      }
    >()
    for (const u of e.upcasters) {
      if (u.type !== e.type || u.version >= e.version || older.has(u.version)) {
        problems.push({
          path: `registry.${e.type}`,
          message:
            `upcaster from ${u.type} v${u.version} does not fit ${e.type} v${e.version} (same type, older version, one per version)`
        })
        continue
      }
      older.set(u.version, { decode: Schema.decodeUnknownExit(u.schema), upcast: u.upcast })
    }
    byType.set(e.type, { entry: e, decodeCurrent: Schema.decodeUnknownExit(e.schema), older })
  }
  if (problems.length > 0) throw Settings.invalid(problems)

  const invalid = (type: string, version: number, message: string) =>
    ({
      _tag: "Invalid",
      error: new DecodeError({ reason: "SchemaMismatch", eventType: type, version, message })
    }) as const

  const decode = (type: string, version: number | undefined, json: unknown): DecodeResult<any> => {
    const found = byType.get(type)
    if (found === undefined) return { _tag: "UnknownType", type }
    const current = found.entry.version
    const received = version ?? current
    const older = received < current ? found.older.get(received) : undefined
    if (older !== undefined) {
      const exit = older.decode(json)
      if (Exit.isFailure(exit)) {
        const error = exit.cause.reasons.find((r) => r._tag === "Fail")
        return invalid(
          type,
          received,
          `${type} v${received}: ${error?._tag === "Fail" ? describe(error.error) : "decode failed"}`
        )
      }
      try {
        return {
          _tag: "Decoded",
          event: { type, version: current, receivedVersion: received, payload: older.upcast(exit.value) }
        }
      } catch (cause) {
        return invalid(type, received, `${type} v${received}: upcaster to v${current} threw: ${Errors.describe(cause)}`)
      }
    }
    const exit = found.decodeCurrent(json)
    if (Exit.isFailure(exit)) {
      const error = exit.cause.reasons.find((r) => r._tag === "Fail")
      const as = received === current ? "" : ` (decoded as v${current})`
      return invalid(
        type,
        received,
        `${type} v${received}${as}: ${error?._tag === "Fail" ? describe(error.error) : "decode failed"}`
      )
    }
    const event = { type, version: current, receivedVersion: received, payload: exit.value }
    if (received > current) return { _tag: "Decoded", event, note: "newer-version" }
    if (received < current) return { _tag: "Decoded", event, note: "unregistered-version" }
    return { _tag: "Decoded", event }
  }

  return { types: [...byType.keys()], decode }
}
