// UUIDv7 (RFC 9562): 48-bit Unix ms timestamp, then random bits. Ids sort by creation time, which
// keeps the outbox's primary-key index append-mostly. Within one millisecond a counter in the
// random part keeps ids from one process monotonic.
let lastMs = -1
let counter = 0

const hex: Array<string> = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"))

// Random bytes are drawn from the OS in blocks: one call per id costs more than the rest of the id.
const pool = new Uint8Array(4096)
let offset = pool.length

export const uuidv7 = (nowMs: number): string => {
  if (offset + 16 > pool.length) {
    globalThis.crypto.getRandomValues(pool)
    offset = 0
  }
  const bytes = pool.subarray(offset, offset + 16)
  offset += 16
  let ms = Math.floor(nowMs)
  if (ms <= lastMs) {
    // Same (or an earlier, after a clock step back) millisecond: keep the last timestamp and bump
    // a 12-bit counter so that ids stay ordered.
    ms = lastMs
    counter++
    if (counter > 0xfff) {
      ms = ++lastMs
      counter = 0
    }
  } else {
    lastMs = ms
    counter = bytes[6]! & 0x07 // start low so that there is room to count up
  }
  bytes[0] = (ms / 2 ** 40) & 0xff
  bytes[1] = (ms / 2 ** 32) & 0xff
  bytes[2] = (ms >>> 24) & 0xff
  bytes[3] = (ms >>> 16) & 0xff
  bytes[4] = (ms >>> 8) & 0xff
  bytes[5] = ms & 0xff
  bytes[6] = 0x70 | ((counter >>> 8) & 0x0f)
  bytes[7] = counter & 0xff
  bytes[8] = 0x80 | (bytes[8]! & 0x3f)
  let out = ""
  for (let i = 0; i < 16; i++) {
    out += hex[bytes[i]!]!
    if (i === 3 || i === 5 || i === 7 || i === 9) out += "-"
  }
  return out
}

/** The Unix ms timestamp inside a UUIDv7. */
export const uuidv7Time = (id: string): number => parseInt(id.slice(0, 8) + id.slice(9, 13), 16)
