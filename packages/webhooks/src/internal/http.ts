/**
 * HTTP details shared by the publisher and the receiver: `Retry-After`, bounded body reads.
 */
import { Duration } from "effect"

/**
 * A `Retry-After` value: delay seconds or an HTTP date, as a duration from `now` (never negative);
 * `undefined` when absent or unreadable.
 */
export const parseRetryAfter = (value: string | null, now: number): Duration.Duration | undefined => {
  if (value === null) return undefined
  const text = value.trim()
  if (/^\d+$/.test(text)) return Duration.seconds(Number(text))
  const at = Date.parse(text)
  if (Number.isNaN(at)) return undefined
  return Duration.millis(Math.max(0, at - now))
}

/**
 * Reads at most `limit` bytes of a body as text and drops the rest, so that a receiver answering
 * with a huge page costs no more than that (and the connection is freed).
 */
export const readBounded = async (
  body: ReadableStream<Uint8Array> | null,
  limit: number
): Promise<{ readonly text: string; readonly truncated: boolean }> => {
  if (body === null) return { text: "", truncated: false }
  const reader = body.getReader()
  const chunks: Array<Uint8Array> = []
  let size = 0
  let truncated = false
  try {
    while (true) {
      const { done, value } = await reader.read()
      if (done) break
      if (size + value.byteLength > limit) {
        chunks.push(value.subarray(0, limit - size))
        size = limit
        truncated = true
        await reader.cancel().catch(() => undefined)
        break
      }
      chunks.push(value)
      size += value.byteLength
    }
  } finally {
    reader.releaseLock()
  }
  const bytes = new Uint8Array(size)
  let offset = 0
  for (const c of chunks) {
    bytes.set(c, offset)
    offset += c.byteLength
  }
  return { text: new TextDecoder().decode(bytes), truncated }
}

/** Drains a body we do not need (a 2xx answer): connections are only reused once their body was read. */
export const discard = async (body: ReadableStream<Uint8Array> | null, limit: number): Promise<void> => {
  if (body === null) return
  await readBounded(body, limit).catch(() => undefined)
}
