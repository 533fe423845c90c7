/**
 * One webhook request, as a plain async function: the per-request path of the publisher, where the
 * cost per event is the driver's (an Effect per request, a fiber per timeout and an Effect
 * semaphore cost about a third more CPU per event than the request itself). It never rejects: every
 * way it can end is an {@link Outcome}.
 */
import { HeaderNames, type Message } from "@tidings/core/Message"
import { Duration } from "effect"
import { signatureHeader } from "./hmac.ts"
import { discard, parseRetryAfter, readBounded } from "./http.ts"
import type { Limiter } from "./limiter.ts"

/** A validated endpoint. */
export interface Target {
  readonly name: string
  readonly url: string
  readonly patterns: ReadonlyArray<string>
  readonly keys: ReadonlyArray<CryptoKey>
  readonly timeout: Duration.Duration
  readonly timeoutMs: number
  readonly limiter: Limiter
  readonly headers: Readonly<Record<string, string>>
}

/** What one request came to. */
export type Outcome =
  | { readonly ok: true }
  | {
    readonly ok: false
    /** `refused`: the receiver answered with an error status; `timeout`: no answer in time; `unavailable`: no connection. */
    readonly kind: "refused" | "timeout" | "unavailable"
    readonly retryable: boolean
    readonly reason: string
    readonly status?: number
    readonly retryAfter?: Duration.Duration
  }

/** Settings shared by every request of a publisher. */
export interface Shared {
  readonly send: (url: string, init: RequestInit) => Promise<Response>
  readonly userAgent: string
  readonly errorBodyBytes: number
  readonly maxRetryAfter: Duration.Duration
}

/** Whether a status is worth another attempt: 408 (request timeout), 429 (too many requests), 5xx. */
export const isRetryableStatus = (status: number): boolean => status === 408 || status === 429 || status >= 500

const describeFailure = (error: unknown): string => {
  if (!(error instanceof Error)) return String(error)
  // fetch wraps the socket error (ECONNREFUSED, ECONNRESET, ...) in a TypeError's cause.
  const cause = (error as { readonly cause?: unknown }).cause
  const detail = cause instanceof Error ? `: ${(cause as { readonly code?: string }).code ?? cause.message}` : ""
  return `${error.message}${detail}`
}

const answered = async (t: Target, shared: Shared, response: Response): Promise<Outcome> => {
  if (response.status >= 200 && response.status < 300) {
    await discard(response.body, 65_536)
    return { ok: true }
  }
  const excerpt = await readBounded(response.body, shared.errorBodyBytes).catch(() => ({ text: "", truncated: false }))
  const text = excerpt.text.trim()
  const reason =
    `${t.name} answered HTTP ${response.status}${response.statusText === "" ? "" : ` ${response.statusText}`}` +
    (text === "" ? "" : `: ${text}${excerpt.truncated ? "…" : ""}`)
  const status = response.status
  if (!isRetryableStatus(status)) return { ok: false, kind: "refused", retryable: false, reason, status }
  const retryAfter = parseRetryAfter(response.headers.get("retry-after"), Date.now())
  return retryAfter === undefined
    ? { ok: false, kind: "refused", retryable: true, reason, status }
    : {
      ok: false,
      kind: "refused",
      retryable: true,
      reason,
      status,
      retryAfter: Duration.min(retryAfter, shared.maxRetryAfter)
    }
}

const interrupted: Outcome = { ok: false, kind: "timeout", retryable: true, reason: "interrupted" }

/**
 * POSTs `body` for `message` to `t` within its concurrency and timeout. `batch` aborts it (the
 * publish was interrupted); `done` is told the outcome and the round trip in seconds.
 */
export const deliver = (
  t: Target,
  shared: Shared,
  message: Message,
  body: string,
  batch: AbortSignal,
  done: (outcome: Outcome, seconds: number) => void
): Promise<Outcome> =>
  t.limiter.run(async () => {
    if (batch.aborted) return interrupted
    const started = Date.now()
    const timestamp = Math.floor(started / 1000)
    const headers: Record<string, string> = {
      ...t.headers,
      "content-type": "application/json",
      "user-agent": shared.userAgent,
      "webhook-id": message.id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": await signatureHeader(t.keys, message.id, timestamp, body)
    }
    const traceparent = message.headers[HeaderNames.traceparent]
    if (traceparent !== undefined) headers["traceparent"] = traceparent
    const controller = new AbortController()
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      controller.abort()
    }, t.timeoutMs)
    const abort = () => controller.abort()
    batch.addEventListener("abort", abort)
    let outcome: Outcome
    try {
      // Redirects are not followed: a receiver that moved must be reconfigured, not guessed.
      const response = await shared.send(t.url, {
        method: "POST",
        headers,
        body,
        signal: controller.signal,
        redirect: "manual"
      })
      outcome = await answered(t, shared, response)
    } catch (error) {
      outcome = timedOut
        ? {
          ok: false,
          kind: "timeout",
          retryable: true,
          reason: `${t.name} did not answer within ${Duration.format(t.timeout)}`
        }
        : batch.aborted
        ? interrupted
        // Connection refused or reset, DNS, TLS: the receiver is unreachable; the event is fine
        // (unavailability, not a failure of this message: the relay counts no attempt for it).
        : {
          ok: false,
          kind: "unavailable",
          retryable: true,
          reason: `${t.name} unreachable: ${describeFailure(error)}`
        }
    } finally {
      clearTimeout(timer)
      batch.removeEventListener("abort", abort)
    }
    done(outcome, (Date.now() - started) / 1000)
    return outcome
  })
