/**
 * Turning postgres.js failures into effect/sql `SqlError`s, and keeping credentials out of them.
 * @internal
 */
import { isTransientSocketCode } from "@tidings/core/Errors"
import { SqlError } from "effect/sql"

/**
 * Error codes postgres.js uses (besides the socket layer's, see `Errors.isTransientSocketCode`) when
 * the connection itself failed rather than a statement: nothing was committed, and a new connection
 * may well succeed.
 */
const connectionCodes: ReadonlySet<string> = new Set([
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT"
])

/** `admin_shutdown`, `crash_shutdown`, `cannot_connect_now`: the server is going away or not up yet. */
const shutdownCodes: ReadonlySet<string> = new Set(["57P01", "57P02", "57P03"])

/** The `code` of a postgres.js or socket error (SQLSTATE for server errors), if any. */
export const errorCode = (cause: unknown): string | undefined => {
  if (typeof cause !== "object" || cause === null || !("code" in cause)) return undefined
  const code = (cause as { readonly code: unknown }).code
  return typeof code === "string" ? code : undefined
}

/** Connection-level failure (socket error, postgres.js connection error, SQLSTATE class 08 or shutdown). */
export const isConnectionCode = (code: string | undefined): boolean =>
  code !== undefined &&
  (isTransientSocketCode(code) || connectionCodes.has(code) || code.startsWith("08") || shutdownCodes.has(code))

/** Worth retrying as a whole (in a new transaction): connection lost, serialization failure, deadlock. */
export const isRetryableCode = (code: string | undefined): boolean =>
  code !== undefined && (isConnectionCode(code) || code === "40001" || code === "40P01")

/**
 * Credentials as they appear in text: the password of a URL's userinfo (`postgres://user:pw@host`),
 * and the value of a password field, as in a connection string (`password=pw`), an inspected options
 * object (`pass: 'pw'`, `password: "pw"`) or JSON (`"password":"pw"`). Only the credential is
 * replaced: a password that also occurs elsewhere (e.g. `postgres`, in a path) stays as it is there.
 */
const credentials: ReadonlyArray<readonly [RegExp, string]> = [
  [/\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*:)([^\s/@]*)@/gi, "$1<redacted>@"],
  [
    /(["']?\b(?:password|passwd|pass|pwd|pgpassword)\b["']?\s*[=:]\s*)(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;&})\]]+)/gi,
    "$1<redacted>"
  ]
]

/** Replaces the credentials in `text` by `<redacted>` (see {@link credentials}). */
export const scrubString = (text: string): string => {
  let out = text
  for (const [pattern, replacement] of credentials) out = out.replace(pattern, replacement)
  return out
}

/**
 * Removes credentials from an error's message, stack and other text fields, in place, so the
 * original error (its class, SQLSTATE `code`, `detail`, ...) stays usable as a cause. Drivers and
 * runtimes are free to echo a connection string (e.g. `new URL` errors), so this runs on every error
 * that leaves the client.
 */
export const scrub = (cause: unknown, depth = 0): unknown => {
  if (depth > 3) return cause
  if (typeof cause === "string") return scrubString(cause)
  if (typeof cause !== "object" || cause === null) return cause
  for (const key of ["message", "stack", "detail", "hint", "address", "input", "query"] as const) {
    const value: unknown = (cause as Record<string, unknown>)[key]
    if (typeof value === "string") {
      const clean = scrubString(value)
      if (clean !== value) {
        try {
          Object.defineProperty(cause, key, {
            value: clean,
            writable: true,
            configurable: true,
            enumerable: key !== "stack" && key !== "message"
          })
        } catch {
          // A frozen error cannot be cleaned: replace it by a plain one that keeps the code.
          return Object.assign(new Error(scrubString(String((cause as { message?: unknown }).message))), {
            code: errorCode(cause)
          })
        }
      }
    }
  }
  const nested = (cause as { cause?: unknown }).cause
  if (nested !== undefined && nested !== cause) {
    const clean = scrub(nested, depth + 1)
    if (clean !== nested) {
      try {
        Object.defineProperty(cause, "cause", { value: clean, writable: true, configurable: true })
      } catch {
        // keep going: message and stack are clean already
      }
    }
  }
  return cause
}

/** Classifies a postgres.js error by SQLSTATE / connection code into an effect/sql reason. */
const classify = (cause: unknown, message: string, operation: string): SqlError.SqlErrorReason => {
  const props = { cause, message, operation }
  const code = errorCode(cause)
  if (code === undefined) return new SqlError.UnknownError(props)
  if (isConnectionCode(code)) return new SqlError.ConnectionError(props)
  if (code.startsWith("28")) return new SqlError.AuthenticationError(props)
  if (code === "42501") return new SqlError.AuthorizationError(props)
  if (code.startsWith("42")) return new SqlError.SqlSyntaxError(props)
  if (code === "23505") {
    const constraint = (cause as { constraint_name?: unknown }).constraint_name
    return new SqlError.UniqueViolation({
      ...props,
      constraint: typeof constraint === "string" && constraint !== "" ? constraint : "unknown"
    })
  }
  if (code.startsWith("23")) return new SqlError.ConstraintError(props)
  if (code === "40P01") return new SqlError.DeadlockError(props)
  if (code === "40001") return new SqlError.SerializationError(props)
  if (code === "55P03") return new SqlError.LockTimeoutError(props)
  if (code === "57014") return new SqlError.StatementTimeoutError(props)
  return new SqlError.UnknownError(props)
}

/**
 * Wraps a postgres.js failure in a `SqlError` whose reason keeps the (scrubbed) original error as
 * `cause`, so callers can read its SQLSTATE `code`.
 */
export const toSqlError = (cause: unknown, operation: string): SqlError.SqlError => {
  const clean = scrub(cause)
  const code = errorCode(clean)
  const text = clean instanceof Error ? clean.message : typeof clean === "string" ? clean : "unknown error"
  const message = `PgClient: ${code !== undefined && !text.includes(code) ? `[${code}] ` : ""}${scrubString(text)}`
  return new SqlError.SqlError({ reason: classify(clean, message, operation) })
}

/** A `SqlError` for a failure detected by the client itself (no driver error to wrap). */
export const clientSqlError = (message: string, operation: string): SqlError.SqlError =>
  new SqlError.SqlError({
    reason: new SqlError.UnknownError({ cause: new Error(message), message: `PgClient: ${message}`, operation })
  })
