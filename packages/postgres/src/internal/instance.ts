// Identifies this process's Tidings instance in NOTIFY payloads, so that a listener can ignore the
// notifications its own process sent (its relays were already woken after the commit). Made on first
// use: Cloudflare Workers refuse random values at module scope (the isolate's start-up).
let id: string | undefined
export const instanceId = (): string => (id ??= globalThis.crypto.randomUUID())
