/**
 * Signatures against the reference implementation (the `standardwebhooks` package), both ways.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { Webhook } from "standardwebhooks"
import * as WebhookSignature from "../src/WebhookSignature.ts"

const secret = WebhookSignature.generateSecret()
const body = JSON.stringify({ type: "order.placed", data: { orderId: "o-1", note: "ünïcødé ✓" } })
const id = "01a2b3c4-0000-7000-8000-000000000001"

describe("WebhookSignature", () => {
  it.effect("our signature passes the standardwebhooks verifier", () =>
    Effect.gen(function*() {
      const key = yield* WebhookSignature.key(secret)
      const timestamp = Math.floor(Date.now() / 1000)
      const signature = yield* WebhookSignature.sign([key], id, timestamp, body)
      assert.match(signature, /^v1,[A-Za-z0-9+/]{43}=$/)
      const verified = new Webhook(secret).verify(body, {
        "webhook-id": id,
        "webhook-timestamp": String(timestamp),
        "webhook-signature": signature
      })
      assert.deepStrictEqual(verified, JSON.parse(body))
      // And the reference implementation computes the same bytes.
      assert.strictEqual(new Webhook(secret).sign(id, new Date(timestamp * 1000), body), signature)
    }))

  it.effect("a signature by standardwebhooks passes ours; a tampered body, id, timestamp or another secret does not", () =>
    Effect.gen(function*() {
      const key = yield* WebhookSignature.key(Redacted.make(secret))
      const timestamp = Math.floor(Date.now() / 1000)
      const theirs = new Webhook(secret).sign(id, new Date(timestamp * 1000), body)
      assert.isTrue(yield* WebhookSignature.isValid([key], theirs, id, timestamp, body))
      assert.isFalse(yield* WebhookSignature.isValid([key], theirs, id, timestamp, body.replace("o-1", "o-2")))
      assert.isFalse(yield* WebhookSignature.isValid([key], theirs, `${id}x`, timestamp, body))
      assert.isFalse(yield* WebhookSignature.isValid([key], theirs, id, timestamp + 1, body))
      const other = yield* WebhookSignature.key(WebhookSignature.generateSecret())
      assert.isFalse(yield* WebhookSignature.isValid([other], theirs, id, timestamp, body))
      // Garbage and other schemes are skipped, not errors.
      assert.isFalse(yield* WebhookSignature.isValid([key], "v1,@@@ v2,abc nonsense", id, timestamp, body))
      assert.isTrue(yield* WebhookSignature.isValid([key], `v1a,xyz ${theirs}`, id, timestamp, body))
    }))

  it.effect("rotation: one signature per secret, and standardwebhooks accepts the request with either secret", () =>
    Effect.gen(function*() {
      const next = WebhookSignature.generateSecret()
      const keys = [yield* WebhookSignature.key(secret), yield* WebhookSignature.key(next)]
      const timestamp = Math.floor(Date.now() / 1000)
      const header = yield* WebhookSignature.sign(keys, id, timestamp, body)
      assert.strictEqual(header.split(" ").length, 2)
      const headers = { "webhook-id": id, "webhook-timestamp": String(timestamp), "webhook-signature": header }
      assert.deepStrictEqual(new Webhook(secret).verify(body, headers), JSON.parse(body))
      assert.deepStrictEqual(new Webhook(next).verify(body, headers), JSON.parse(body))
      // A receiver holding only the new secret accepts it too.
      assert.isTrue(yield* WebhookSignature.isValid([keys[1]!], header, id, timestamp, body))
    }))

  it.effect("secrets: whsec_ prefix optional; not base64, too short or too long is InvalidSecret without the secret in it", () =>
    Effect.gen(function*() {
      const bare = secret.slice("whsec_".length)
      yield* WebhookSignature.key(bare)
      for (const bad of ["whsec_not base64!", "whsec_" + btoa("short"), "whsec_" + btoa("x".repeat(65)), ""]) {
        const error = yield* Effect.flip(WebhookSignature.key(bad))
        assert.strictEqual(error._tag, "InvalidSecret")
        if (bad !== "") assert.notInclude(error.message, bad.slice(6))
      }
    }))
})
