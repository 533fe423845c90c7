// From an AMQP delivery to core's `Consumer.Delivery`: body limits, content type, JSON, the version
// header (an integer >= 1, or absent), the registry's decode, and the attempt count.
import type * as Consumer from "@tidings/core/Consumer"
import type * as ConsumerRunner from "@tidings/core/ConsumerRunner"
import { describe } from "@tidings/core/Errors"
import * as EventRegistry from "@tidings/core/EventRegistry"
import type { ConsumeMessage } from "amqplib"
import { HeaderNames } from "./headers.ts"

const toInt = (value: unknown): number | undefined => {
  const n = typeof value === "number"
    ? value
    : typeof value === "bigint"
    ? Number(value)
    : typeof value === "string" && /^\d+$/.test(value)
    ? Number(value)
    : NaN
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined
}

export const str = (value: unknown): string | undefined => typeof value === "string" ? value : undefined

/** 1 + delayed retries so far (our header) + broker redeliveries of this copy (quorum's count, or the redelivered flag). */
export const attemptOf = (message: ConsumeMessage): number => {
  const headers = message.properties.headers ?? {}
  const retries = toInt(headers[HeaderNames.attempt]) ?? 0
  const deliveries = toInt(headers["x-delivery-count"]) ?? (message.fields.redelivered ? 1 : 0)
  return retries + deliveries + 1
}

const isJsonContentType = (contentType: unknown) =>
  contentType === undefined || contentType === null || contentType === "" ||
  (typeof contentType === "string" && /^(application|text)\/([\w.+-]*\+)?json\s*(;.*)?$/i.test(contentType))

/** Decodes a delivery for the handler, or says why it cannot be. */
export const prepare = <A>(
  message: ConsumeMessage,
  options: { readonly registry: EventRegistry.EventRegistry<A>; readonly maxBodyBytes: number; readonly queue: string }
): ConsumerRunner.Prepared<A> => {
  const { properties, fields, content } = message
  const headers = properties.headers ?? {}
  const type = str(properties.type)
  const version = EventRegistry.parseVersion(headers[HeaderNames.version], type)
  const failure = (reason: EventRegistry.DecodeFailure, text: string): ConsumerRunner.Prepared<A> => ({
    _tag: "DecodeFailure",
    error: new EventRegistry.DecodeError({
      reason,
      message: text,
      ...(type === undefined ? {} : { eventType: type }),
      ...(typeof version === "number" ? { version } : {})
    })
  })
  if (content.length > options.maxBodyBytes) {
    return failure("TooLarge", `body of ${content.length} bytes exceeds the limit of ${options.maxBodyBytes}`)
  }
  if (!isJsonContentType(properties.contentType)) {
    return failure("UnsupportedContentType", `content type ${String(properties.contentType)} is not JSON`)
  }
  if (type === undefined || type === "") return failure("MissingType", "the message has no type property")
  if (version instanceof EventRegistry.DecodeError) return { _tag: "DecodeFailure", error: version }
  let json: unknown
  try {
    json = JSON.parse(content.toString("utf8"))
  } catch (error) {
    return failure("InvalidJson", `body is not JSON: ${describe(error)}`)
  }
  const result = options.registry.decode(type, version, json)
  if (result._tag === "UnknownType") return result
  if (result._tag === "Invalid") return { _tag: "DecodeFailure", error: result.error }
  const occurred = str(headers[HeaderNames.occurredAt])
  const occurredAt = occurred === undefined ? undefined : new Date(occurred)
  const messageId = str(properties.messageId)
  const attempt = attemptOf(message)
  const delivery: Consumer.Delivery<A> = {
    event: result.event,
    messageId,
    id: messageId,
    type,
    version,
    payload: (result.event as { readonly payload?: unknown }).payload,
    headers,
    attempt,
    // Delivered before: redelivered by the broker, or a retry copy of an earlier attempt.
    redelivered: fields.redelivered || attempt > 1,
    aggregateType: str(headers[HeaderNames.aggregateType]),
    aggregateId: str(headers[HeaderNames.aggregateId]),
    orderingKey: str(headers[HeaderNames.orderingKey]),
    occurredAt: occurredAt === undefined || Number.isNaN(occurredAt.getTime()) ? undefined : occurredAt,
    queue: options.queue,
    exchange: fields.exchange,
    routingKey: fields.routingKey
  }
  return result.note === undefined ? { _tag: "Decoded", delivery } : { _tag: "Decoded", delivery, note: result.note }
}
