/**
 * Webhook signatures as the Standard Webhooks convention defines them (https://www.standardwebhooks.com):
 *
 * - `webhook-id`: the message id (the outbox event id), the receiver's idempotency key;
 * - `webhook-timestamp`: seconds since the epoch, of this attempt;
 * - `webhook-signature`: space-separated `v1,<base64 HMAC-SHA256>` over `<id>.<timestamp>.<body>`,
 *   one per secret (several during a secret rotation).
 *
 * Secrets are `whsec_` followed by 24 to 64 random bytes in base64 (the prefix is optional on input).
 * Everything runs on WebCrypto (`crypto.subtle`), so it works on Node, Deno, Bun and Workers.
 * @module
 */
import { type Cause, Effect, Redacted, Schema } from "effect"
import * as Hmac from "./internal/hmac.ts"

/**
 * Header names of the convention.
 * @since 0.1.0
 * @category constants
 */
export const Headers = {
  id: "webhook-id",
  timestamp: "webhook-timestamp",
  signature: "webhook-signature"
} as const

/**
 * A secret as given: `whsec_…` text, plain or `Redacted`.
 * @since 0.1.0
 * @category models
 */
export type SecretInput = string | Redacted.Redacted<string>

const InvalidSecretBase: Schema.Class<
  InvalidSecret,
  Schema.TaggedStruct<"InvalidSecret", {
    readonly message: Schema.String
  }>,
  Cause.YieldableError
> = Schema.TaggedError<InvalidSecret>()("InvalidSecret", {
  message: Schema.String
})

/**
 * A secret that cannot be used (not base64, too short or too long). The secret itself is never in the message.
 * @since 0.1.0
 * @category errors
 */
export class InvalidSecret extends InvalidSecretBase {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * A parsed secret: its HMAC key, ready to sign and verify.
 * @since 0.1.0
 * @category models
 */
export interface Key {
  readonly _tag: "WebhookKey"
  readonly cryptoKey: CryptoKey
}

const prefix = "whsec_"

/**
 * Standard base64 (with padding) of `bytes`.
 * @since 0.1.0
 * @category encoding
 */
export const toBase64: (bytes: Uint8Array) => string = Hmac.toBase64

/**
 * Bytes of standard base64 text; `undefined` when it is not base64.
 * @since 0.1.0
 * @category encoding
 */
export const fromBase64 = (text: string): Uint8Array | undefined => {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 === 1) return undefined
  try {
    const binary = atob(text)
    const bytes = new Uint8Array(binary.length)
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i)
    return bytes
  } catch {
    return undefined
  }
}

/**
 * A new random secret (`whsec_` + 32 bytes), for an endpoint to share with its receiver.
 * @since 0.1.0
 * @category constructors
 */
export const generateSecret = (): string => prefix + toBase64(crypto.getRandomValues(new Uint8Array(32)))

/**
 * Parses a secret and imports its HMAC-SHA256 key.
 * @since 0.1.0
 * @category constructors
 */
export const key = (secret: SecretInput): Effect.Effect<Key, InvalidSecret> =>
  Effect.gen(function*() {
    const raw = Redacted.isRedacted(secret) ? Redacted.value(secret) : secret
    if (typeof raw !== "string") return yield* new InvalidSecret({ message: "a webhook secret must be a string" })
    const bytes = fromBase64(raw.startsWith(prefix) ? raw.slice(prefix.length) : raw)
    if (bytes === undefined) {
      return yield* new InvalidSecret({ message: "a webhook secret must be whsec_ followed by base64" })
    }
    if (bytes.length < 24 || bytes.length > 64) {
      return yield* new InvalidSecret({
        message: `a webhook secret must hold 24 to 64 bytes, this one holds ${bytes.length}`
      })
    }
    const cryptoKey = yield* Effect.tryPromise({
      try: () =>
        crypto.subtle.importKey("raw", bytes as Uint8Array<ArrayBuffer>, { name: "HMAC", hash: "SHA-256" }, false, [
          "sign",
          "verify"
        ]),
      catch: () => new InvalidSecret({ message: "the webhook secret could not be imported as an HMAC key" })
    })
    return { _tag: "WebhookKey", cryptoKey } as const
  })

/**
 * The `webhook-signature` value for one attempt: `v1,<base64>` per key, space-separated.
 * @since 0.1.0
 * @category combinators
 */
export const sign = (keys: ReadonlyArray<Key>, id: string, timestamp: number, body: string): Effect.Effect<string> =>
  Effect.promise(() => Hmac.signatureHeader(keys.map((k) => k.cryptoKey), id, timestamp, body))

/**
 * Whether one of the `v1` signatures of `header` was made with one of `keys` over
 * `<id>.<timestamp>.<body>`. The comparison is WebCrypto's `verify`, which takes constant time.
 * @since 0.1.0
 * @category combinators
 */
export const isValid = (
  keys: ReadonlyArray<Key>,
  header: string,
  id: string,
  timestamp: number,
  body: string
): Effect.Effect<boolean> =>
  Effect.promise(async () => {
    const data = Hmac.content(id, timestamp, body)
    for (const entry of header.split(" ")) {
      const comma = entry.indexOf(",")
      if (comma < 0 || entry.slice(0, comma) !== "v1") continue
      const signature = fromBase64(entry.slice(comma + 1))
      if (signature === undefined || signature.length !== 32) continue
      for (const k of keys) {
        if (await crypto.subtle.verify("HMAC", k.cryptoKey, signature as Uint8Array<ArrayBuffer>, data)) return true
      }
    }
    return false
  })
