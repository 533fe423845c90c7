/** The Standard Webhooks signature itself, on WebCrypto: shared by the signer and the verifier. */

const encoder = new TextEncoder()

/** Standard base64 (with padding) of `bytes`. */
export const toBase64 = (bytes: Uint8Array): string => {
  let binary = ""
  for (let i = 0; i < bytes.length; i++) binary += String.fromCharCode(bytes[i]!)
  return btoa(binary)
}

/** The signed content: `<id>.<timestamp>.<body>`. */
export const content = (id: string, timestamp: number, body: string): Uint8Array<ArrayBuffer> => encoder.encode(`${id}.${timestamp}.${body}`)

/** The part of `node:crypto` used here. */
interface NodeCrypto {
  readonly createSecretKey: (key: Uint8Array) => object
  readonly createHmac: (algorithm: string, key: object) => {
    update(data: string): { digest(encoding: "base64"): string }
  }
}

// `node:crypto` where the runtime has it (Node ≥ 20.16, Deno, Bun, Workers with nodejs_compat),
// found without importing it so that the package still loads where it is missing (browsers,
// plain Workers), which keep WebCrypto. Its HMAC runs synchronously: WebCrypto's `sign` goes
// through the thread pool and a promise, and cost more CPU per webhook than the HTTP request itself.
const nodeCrypto: NodeCrypto | undefined = (() => {
  try {
    const c = (globalThis as { readonly process?: { readonly getBuiltinModule?: (id: string) => unknown } }).process
      ?.getBuiltinModule?.("node:crypto") as Partial<NodeCrypto> | undefined
    return typeof c?.createHmac === "function" && typeof c.createSecretKey === "function" ? c as NodeCrypto : undefined
  } catch {
    return undefined
  }
})()

// The same secret as a `node:crypto` key, beside its (non-extractable) CryptoKey: set when the
// secret is imported, read when signing.
const nodeKeys = new WeakMap<CryptoKey, object>()

/** Records the secret of `key` for the synchronous signer, where the runtime has one. */
export const remember = (key: CryptoKey, secret: Uint8Array): void => {
  if (nodeCrypto === undefined) return
  try {
    nodeKeys.set(key, nodeCrypto.createSecretKey(Uint8Array.from(secret)))
  } catch {
    // No synchronous key: this key signs with WebCrypto.
  }
}

/**
 * `v1,<base64>` per key, space-separated, computed synchronously; `undefined` when a key has no
 * synchronous signer (then {@link signatureHeader} signs with WebCrypto). The same bytes either way.
 */
export const signatureHeaderNow = (keys: ReadonlyArray<CryptoKey>, id: string, timestamp: number, body: string): string | undefined => {
  if (nodeCrypto === undefined) return undefined
  const data = `${id}.${timestamp}.${body}`
  let header = ""
  for (const k of keys) {
    const nodeKey = nodeKeys.get(k)
    if (nodeKey === undefined) return undefined
    header += `${header === "" ? "" : " "}v1,${nodeCrypto.createHmac("sha256", nodeKey).update(data).digest("base64")}`
  }
  return header
}

/** `v1,<base64>` per key, space-separated. */
export const signatureHeader = async (keys: ReadonlyArray<CryptoKey>, id: string, timestamp: number, body: string): Promise<string> => {
  const now = signatureHeaderNow(keys, id, timestamp, body)
  if (now !== undefined) return now
  const data = content(id, timestamp, body)
  if (keys.length === 1) return `v1,${toBase64(new Uint8Array(await crypto.subtle.sign("HMAC", keys[0]!, data)))}`
  const signatures = await Promise.all(keys.map((k) => crypto.subtle.sign("HMAC", k, data)))
  return signatures.map((s) => `v1,${toBase64(new Uint8Array(s))}`).join(" ")
}
