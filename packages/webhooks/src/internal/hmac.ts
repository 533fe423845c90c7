/** The Standard Webhooks signature itself, on WebCrypto: shared by the signer and the verifier. */

const encoder = new TextEncoder()

/** Standard base64 (with padding) of `bytes`. */
export const toBase64 = (bytes: Uint8Array): string => {
  let binary = ""
  for (let i = 0; i < bytes.length; i++) binary += String.fromCharCode(bytes[i]!)
  return btoa(binary)
}

/** The signed content: `<id>.<timestamp>.<body>`. */
export const content = (id: string, timestamp: number, body: string): Uint8Array<ArrayBuffer> =>
  encoder.encode(`${id}.${timestamp}.${body}`)

/** `v1,<base64>` per key, space-separated. */
export const signatureHeader = async (
  keys: ReadonlyArray<CryptoKey>,
  id: string,
  timestamp: number,
  body: string
): Promise<string> => {
  const data = content(id, timestamp, body)
  if (keys.length === 1) return `v1,${toBase64(new Uint8Array(await crypto.subtle.sign("HMAC", keys[0]!, data)))}`
  const signatures = await Promise.all(keys.map((k) => crypto.subtle.sign("HMAC", k, data)))
  return signatures.map((s) => `v1,${toBase64(new Uint8Array(s))}`).join(" ")
}
