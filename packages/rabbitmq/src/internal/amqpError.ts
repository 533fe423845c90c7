// Turning amqplib's errors into typed ones, at the boundary. amqplib gives a numeric `code` for
// channel and connection closes but not for a refused handshake, whose reply code only appears in
// the text ("Handshake terminated by server: 403 (ACCESS-REFUSED) ..."): it is read out here once,
// so that everything after this point decides on codes.
import { describe, isTransientSocketCode } from "@tidings/core/Errors"
import { AmqpConnectionError, TopologyError } from "../AmqpErrors.ts"

/** AMQP reply codes after which trying again cannot help. */
const permanentCodes = new Set([
  403, // ACCESS_REFUSED
  404, // NOT_FOUND
  406, // PRECONDITION_FAILED
  402, // INVALID_PATH
  501, // FRAME_ERROR
  502, // SYNTAX_ERROR
  503, // COMMAND_INVALID
  504, // CHANNEL_ERROR
  530, // NOT_ALLOWED (e.g. unknown vhost)
  540 // NOT_IMPLEMENTED
])

/** The reply code or socket code of an amqplib error, if any. */
export const errorCode = (error: unknown): number | string | undefined => {
  if (typeof error !== "object" || error === null) return undefined
  const code = (error as { readonly code?: unknown }).code
  if (typeof code === "number" || typeof code === "string") return code
  const message = (error as { readonly message?: unknown }).message
  if (typeof message === "string") {
    const m = /\b([2-5]\d\d) \(([A-Z_-]+)\)/.exec(message)
    if (m !== null) return Number(m[1])
  }
  return undefined
}

/** Whether an error with this code is worth another try. Unknown errors are: the connection loop backs off. */
export const isRetryableCode = (code: number | string | undefined): boolean => {
  if (typeof code === "number") return !permanentCodes.has(code)
  // errno-style codes (ECONNRESET, ...) are the network's; TLS and Node's ERR_* codes are configuration.
  if (typeof code === "string") return isTransientSocketCode(code) || /^E[A-Z]+$/.test(code)
  return true
}

// `scheme://user:password@` in any URL: the userinfo is the credential.
const userinfo = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@"'<>]+@/gi
// `password=x`, `password: "x"`, `"passwd":"x"`, `pwd='x'`: the value is the credential.
const passwordField = /\b(pass(?:word|wd)?|pwd|secret)(["']?\s*[:=]\s*)(["']?)[^\s"',;&}]+/gi

/**
 * Removes credentials from a text: the userinfo of URLs and the values of password fields. Only
 * where they appear as credentials: a password that also occurs as an ordinary word (say `guest`,
 * or a package name in a stack path) is left alone there, so logs stay readable and the text does
 * not point at the password by blanking every occurrence of it.
 */
export const scrub = (text: string): string =>
  text.replace(userinfo, "$1<redacted>@").replace(passwordField, "$1$2$3<redacted>")

// amqplib's errors are plain `Error`s: their message is the text (Errors.describe, the one error-to-text).
const messageOf = (error: unknown): string => describe(error)

/** A typed connection error, its text scrubbed. */
export const connectionError = (operation: string, error: unknown): AmqpConnectionError => {
  if (error instanceof AmqpConnectionError) return error
  const code = errorCode(error)
  return new AmqpConnectionError({
    operation,
    message: scrub(messageOf(error)),
    ...(code === undefined ? {} : { code }),
    retryable: isRetryableCode(code)
  })
}

/** A typed topology error, its text scrubbed. */
export const topologyError = (operation: string, entity: string, error: unknown): TopologyError => {
  if (error instanceof TopologyError) return error
  const code = errorCode(error)
  return new TopologyError({
    operation,
    entity,
    message: scrub(messageOf(error)),
    ...(code === undefined ? {} : { code }),
    retryable: isRetryableCode(code)
  })
}
