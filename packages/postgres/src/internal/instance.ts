// Identifies this process's Tidings instance in NOTIFY payloads, so that a listener can ignore the
// notifications its own process sent (its relays were already woken after the commit).
export const instanceId: string = globalThis.crypto.randomUUID()
