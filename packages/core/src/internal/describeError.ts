/**
 * A one-line description of any error, for logs and stored failure reasons: `Tag: message`, or a
 * tagged error's fields when it has no message.
 * @internal
 */
export const describeError = (error: unknown): string => {
  if (typeof error === "object" && error !== null) {
    const e = error as { readonly _tag?: unknown; readonly message?: unknown }
    const tag = typeof e._tag === "string" ? e._tag : undefined
    const message = typeof e.message === "string" && e.message !== "" ? e.message : undefined
    if (tag !== undefined && message !== undefined) return `${tag}: ${message}`
    if (tag !== undefined) {
      // A tagged error without a message: its fields say what happened.
      try {
        const { _tag, ...fields } = error as Record<string, unknown>
        return Object.keys(fields).length === 0 ? tag : `${tag} ${JSON.stringify(fields)}`
      } catch {
        return tag
      }
    }
    if (message !== undefined) return message
  }
  return String(error)
}
