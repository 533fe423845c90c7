// The broker URL: validated once, kept out of every error and log. Only the description (the URL
// without credentials) is ever shown.
import type { InvalidConfig } from "@tidings/core/Errors"
import * as Settings from "@tidings/core/Settings"
import { Effect, Redacted } from "effect"

export interface ResolvedUrl {
  /** The URL to connect with (credentials included, heartbeat set). */
  readonly url: string
  /** `amqp://host:port/vhost`: for logs and spans. */
  readonly description: string
}

/** Validates the URL; neither the URL nor its parts appear in the error. */
export const resolveUrl = (
  input: Redacted.Redacted<string> | string,
  heartbeatSeconds: number
): Effect.Effect<ResolvedUrl, InvalidConfig> =>
  Effect.gen(function*() {
    const raw: unknown = Redacted.isRedacted(input) ? Redacted.value(input) : input
    if (typeof raw !== "string" || !/^amqps?:\/\//i.test(raw)) {
      return yield* Settings.invalid([{ path: "url", message: "must be an amqp:// or amqps:// URL" }])
    }
    let url: URL
    try {
      url = new URL(raw)
    } catch {
      // The URL error's message would repeat the URL, password included.
      return yield* Settings.invalid([{ path: "url", message: "is not a valid URL" }])
    }
    url.searchParams.set("heartbeat", String(heartbeatSeconds))
    const vhost = url.pathname === "" ? "/" : url.pathname
    return { url: url.toString(), description: `${url.protocol}//${url.host}${vhost}` }
  })
