import { assert, describe, it } from "@effect/vitest"
import { logConsumerContract, logRelayContract } from "@tidings/core/testing"
import * as LogStore from "../src/LogStore.ts"
import * as MemoryLogStore from "../src/MemoryLogStore.ts"

describe("partitions", () => {
  it("FNV-1a 32 matches the published test vectors (UTF-8 bytes)", () => {
    assert.strictEqual(LogStore.fnv1a32(""), 0x811c9dc5)
    assert.strictEqual(LogStore.fnv1a32("a"), 0xe40c292c)
    assert.strictEqual(LogStore.fnv1a32("foobar"), 0xbf9cf968)
    // Multi-byte characters hash as their UTF-8 encoding (TextEncoder's bytes).
    for (const key of ["é", "order-42", "日本語", "emoji-😀", "a\uD800b"]) {
      let h = 0x811c9dc5
      for (const byte of new TextEncoder().encode(key)) h = Math.imul(h ^ byte, 0x01000193)
      assert.strictEqual(LogStore.fnv1a32(key), h >>> 0, key)
    }
  })

  it("a key's partition is stable and spreads keys over the partitions", () => {
    assert.strictEqual(LogStore.partitionOf("order-42", 16), LogStore.fnv1a32("order-42") % 16)
    const counts = new Array<number>(16).fill(0)
    for (let i = 0; i < 16_000; i++) counts[LogStore.partitionOf(`order-${i}`, 16)]!++
    for (const c of counts) assert.isAbove(c, 800)
  })

  it("positions order by transaction id as an integer, then sequence", () => {
    assert.isBelow(LogStore.compare({ tx: "9", seq: 5 }, { tx: "10", seq: 1 }), 0)
    assert.isAbove(LogStore.compare({ tx: "10", seq: 2 }, { tx: "10", seq: 1 }), 0)
    assert.strictEqual(LogStore.compare({ tx: "7", seq: 3 }, { tx: "7", seq: 3 }), 0)
  })
})

const memory = MemoryLogStore.make({ partitions: 4 })
logRelayContract("memory", memory, { clock: "test" })
logConsumerContract("memory", memory, { clock: "test" })
