/** JSON for responses: bigints as strings (JSON.stringify throws on them), Dates as ISO strings. */
export const stringify = (value: unknown): string =>
  JSON.stringify(value, (_key, v: unknown) => typeof v === "bigint" ? v.toString() : v) ?? "null"

/** The content type of every JSON response. */
export const contentType = "application/json; charset=utf-8"

/** A JSON response outside a Hono context (middleware answers, error handlers). */
export const response = (body: unknown, status: number, headers: Record<string, string> = {}): Response =>
  new Response(stringify(body), { status, headers: { "content-type": contentType, ...headers } })
