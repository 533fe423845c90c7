import { assert, describe, it } from "@effect/vitest"
import * as Message from "../src/Message.ts"

const fields = {
  id: "01a2160d-14c4-7002-bbb8-8957723b5078",
  type: "order.placed",
  version: 1,
  aggregateType: "order",
  aggregateId: "o-1",
  orderingKey: "o-1",
  headers: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" },
  occurredAt: new Date("2026-11-26T00:00:00.000Z")
}

describe("Message read back from a store", () => {
  it("parses its payload only when read, and equals the same message built in memory", () => {
    const stored = "{\"total\": 12, \"items\": [\"a\"]}"
    const message = Message.fromStoredJson(fields, stored)
    assert.strictEqual(Message.payloadJson(message), stored, "the stored text, not a re-encoding")
    assert.deepStrictEqual(message, { ...fields, payload: { total: 12, items: ["a"] } })
    assert.strictEqual(message.payload, message.payload, "parsed once")
  })

  it("a copy with other headers keeps the stored text; a spread copy is encoded again", () => {
    const message = Message.fromStoredJson(fields, "{\"n\": 1}")
    const copy = Message.withHeaders(message, { traceparent: "x" })
    assert.strictEqual(Message.payloadJson(copy), "{\"n\": 1}")
    assert.deepStrictEqual(copy.headers, { traceparent: "x" })
    assert.deepStrictEqual(message.headers, fields.headers, "the original is untouched")
    assert.deepStrictEqual(copy.payload, { n: 1 })
    const spread = { ...message }
    assert.strictEqual(Message.payloadJson(spread), "{\"n\":1}")
    assert.strictEqual(Message.payloadJson({ ...fields, payload: [1, "two"] }), "[1,\"two\"]")
  })

  it("as a plain object: the schema's fields in order, the payload parsed, nothing else", () => {
    const message = Message.fromStoredJson(fields, "{\"n\": 1}")
    const plain = Message.toObject({ ...message, extra: true } as Message.Message)
    assert.deepStrictEqual(Object.keys(plain), [
      "id",
      "type",
      "version",
      "aggregateType",
      "aggregateId",
      "orderingKey",
      "payload",
      "headers",
      "occurredAt"
    ])
    assert.deepStrictEqual(plain, { ...fields, payload: { n: 1 } })
    assert.isUndefined(Object.getOwnPropertyDescriptor(plain, "payload")?.get, "a value, not the stored getter")
  })

  it("a stored payload that is not JSON fails when read, not when loaded", () => {
    const message = Message.fromStoredJson(fields, "{not json")
    assert.strictEqual(message.id, fields.id)
    assert.throws(() => message.payload, SyntaxError)
  })
})
