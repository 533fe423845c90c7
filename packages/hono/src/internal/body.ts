/**
 * Bounded request bodies: the limits a request is read with (set by `Safety.middleware`, defaults
 * otherwise), a reader that stops at the limit, and the cheap checks that run before `JSON.parse`.
 */
import type { Context as HonoContext } from "hono"
import { PayloadTooLarge } from "../HttpErrors.ts"

/** The limits a request is read with. */
export interface Limits {
  /** Largest body, in bytes. */
  readonly bodyLimit: number
  /** Deepest nesting of arrays and objects in a JSON body. */
  readonly maxJsonDepth: number
}

/** 1 MiB: a JSON command is a few kilobytes; anything near this is a mistake or an attack. */
export const defaultBodyLimit = 1024 * 1024
/** Deep enough for any document a command carries; a deeper one is an attack on the parser. */
export const defaultMaxJsonDepth = 64

export const defaults: Limits = { bodyLimit: defaultBodyLimit, maxJsonDepth: defaultMaxJsonDepth }

// A context variable, so that `Input` reads with the limits of the app's middleware.
const key = "tidings.limits"

/** The limits of this request: the middleware's, else the defaults. */
export const limitsOf = (c: HonoContext): Limits => (c.get(key as never) as Limits | undefined) ?? defaults

/** Records the limits for the handlers of this request. */
export const setLimits = (c: HonoContext, limits: Limits): void => c.set(key as never, limits as never)

export const tooLarge = (limit: number) =>
  new PayloadTooLarge({ message: `the request body is larger than ${limit} bytes` })

/** The declared `Content-Length`, or `undefined` without one (chunked) or with a malformed one. */
export const declaredLength = (headers: Headers): number | undefined => {
  const raw = headers.get("content-length")
  if (raw === null || headers.has("transfer-encoding") || !/^\d{1,15}$/.test(raw.trim())) return undefined
  return Number(raw.trim())
}

/**
 * `body` that errors with `PayloadTooLarge` as soon as more than `limit` bytes went through, and
 * cancels the source then: a streamed body is never read far past the limit, whoever reads it.
 */
export const limitedStream = (body: ReadableStream<Uint8Array>, limit: number): ReadableStream<Uint8Array> => {
  const reader = body.getReader()
  let size = 0
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { done, value } = await reader.read()
      if (done) return controller.close()
      size += value.byteLength
      if (size > limit) {
        reader.cancel().catch(() => undefined)
        return controller.error(tooLarge(limit))
      }
      controller.enqueue(value)
    },
    cancel: (reason) => reader.cancel(reason)
  })
}

/**
 * Reads the whole body, at most `limit` bytes: rejects with `PayloadTooLarge` for a declared length
 * over the limit (without reading) or as soon as the stream passes it.
 */
export const read = async (request: Request, limit: number): Promise<Uint8Array> => {
  const declared = declaredLength(request.headers)
  if (declared !== undefined && declared > limit) throw tooLarge(limit)
  if (request.body === null) return new Uint8Array(0)
  const reader = request.body.getReader()
  const chunks: Array<Uint8Array> = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > limit) {
      reader.cancel().catch(() => undefined)
      throw tooLarge(limit)
    }
    chunks.push(value)
  }
  if (chunks.length === 1) return chunks[0]!
  const all = new Uint8Array(size)
  let offset = 0
  for (const chunk of chunks) {
    all.set(chunk, offset)
    offset += chunk.byteLength
  }
  return all
}

/** True for `application/json` and `application/<anything>+json`, with any parameters. */
export const isJson = (contentType: string | undefined): boolean => {
  if (contentType === undefined) return false
  const type = contentType.split(";", 1)[0]!.trim().toLowerCase()
  return type === "application/json" || (type.startsWith("application/") && type.endsWith("+json"))
}

/**
 * The deepest nesting of `[` and `{` outside strings, stopping as soon as it passes `max`: a linear
 * scan that costs about a millisecond per megabyte, where `JSON.parse` of a megabyte of nested
 * arrays blocks the event loop for over 100 ms (and whatever walks the result recurses as deep).
 */
export const exceedsDepth = (text: string, max: number): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // backslash: skip the escaped character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 91 || c === 123) {
      if (++depth > max) return true
    } else if (c === 93 || c === 125) depth--
  }
  return false
}
