/**
 * The demo: drives the running service over HTTP like a client would, prints progress as it goes,
 * checks that each order ends as the story says, and prints a summary (sagas, outbox events, the
 * order list, stock, metrics). Every wait is bounded; a surprise throws {@link DemoError}.
 */

import type { OrderListRow } from "./domain.ts"

/** What the demo needs from its host. */
export interface Options {
  /** The service's base URL. */
  readonly url: string
  readonly adminToken: string
  readonly say: (line: string) => void
  /** Outbox events by type and status (read from the database by the host). */
  readonly eventCounts: () => Promise<
    ReadonlyArray<{ readonly event_type: string; readonly status: string; readonly n: number }>
  >
  /** Prefix of this run's order ids (default: from the clock). */
  readonly runId?: string
  /** Upper bound of each wait (default 30 s). */
  readonly timeoutMs?: number
}

/** The story did not go as told: an order ended otherwise, or a wait timed out. */
export class DemoError extends Error {
  override readonly name = "DemoError"
}

/** What the demo did, for callers that check it. */
export interface Outcome {
  readonly orders: ReadonlyArray<
    { readonly id: string; readonly customer: string; readonly status: string; readonly saga: string }
  >
  readonly retriedEventId: string
}

interface OrderJson {
  readonly order: {
    readonly id: string
    readonly customer: string
    readonly sku: string
    readonly quantity: number
    readonly amount_cents: number
    readonly status: string
    readonly reason: string | null
    readonly saga_id: string
  }
  readonly saga: {
    readonly id: string
    readonly status: string
    readonly error: string | null
    readonly steps: ReadonlyArray<{ readonly name: string; readonly status: string; readonly error: string | null }>
  }
}

type ListRow = Omit<OrderListRow, "version">

const money = (cents: number) => (cents / 100).toFixed(2)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Runs the demo against a running service. */
export const run = async (options: Options): Promise<Outcome> => {
  const { say } = options
  const timeoutMs = options.timeoutMs ?? 30_000
  const runId = options.runId ?? `o${Date.now().toString(36)}`
  const started = Date.now()

  const call = async (
    method: string,
    path: string,
    body?: unknown,
    auth = false
  ): Promise<{ status: number; json: any }> => {
    const headers: Record<string, string> = {}
    if (body !== undefined) headers["content-type"] = "application/json"
    if (auth) headers["authorization"] = `Bearer ${options.adminToken}`
    const response = await fetch(`${options.url}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(10_000)
    })
    const text = await response.text()
    return { status: response.status, json: text === "" ? undefined : JSON.parse(text) }
  }
  const expectStatus = (what: string, got: { status: number; json: unknown }, ...wanted: Array<number>) => {
    if (!wanted.includes(got.status)) {
      throw new DemoError(
        `${what}: expected HTTP ${wanted.join(" or ")}, got ${got.status} ${JSON.stringify(got.json)}`
      )
    }
  }
  /** Polls `read` until `done`, at most `timeoutMs`. */
  const until = async <A>(what: string, read: () => Promise<A>, done: (a: A) => boolean): Promise<A> => {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const value = await read()
      if (done(value)) return value
      if (Date.now() > deadline) {
        throw new DemoError(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(value)}`)
      }
      await sleep(50)
    }
  }

  // ——— 1. orders over HTTP ———
  const plan = [
    {
      customer: "ada",
      sku: "book",
      quantity: 2,
      amountCents: 2_598,
      expect: "confirmed",
      story: "reserved and charged"
    },
    {
      customer: "grace",
      sku: "mug",
      quantity: 1,
      amountCents: 1_250,
      expect: "confirmed",
      story: "the payment gateway fails the first delivery: the consumer redelivers it"
    },
    {
      customer: "mallory",
      sku: "lamp",
      quantity: 1,
      amountCents: 8_900,
      expect: "cancelled",
      story: "the card is declined: the saga releases the reserved lamp"
    },
    {
      customer: "linus",
      sku: "lamp",
      quantity: 50,
      amountCents: 44_500,
      expect: "cancelled",
      story: "only 5 lamps in stock: nothing to undo"
    }
  ] as const
  say("— placing orders over HTTP (POST /orders) —")
  const bad = await call("POST", "/orders", { customer: "ada", sku: "book", quantity: 0, amountCents: 100 })
  expectStatus("an invalid order", bad, 400)
  say(
    `invalid order (quantity 0) → ${bad.status} ${bad.json?.error?.tag}: ${
      (bad.json?.error?.issues ?? []).map((i: { path: Array<unknown>; message: string }) =>
        `${i.path.join(".")}: ${i.message}`
      ).join("; ")
    }`
  )
  const placed: Array<{ id: string; customer: string; expect: string }> = []
  for (const [i, o] of plan.entries()) {
    const id = `${runId}-${i + 1}`
    const res = await call("POST", "/orders", {
      orderId: id,
      customer: o.customer,
      sku: o.sku,
      quantity: o.quantity,
      amountCents: o.amountCents
    })
    expectStatus(`placing ${id}`, res, 202)
    placed.push({ id, customer: o.customer, expect: o.expect })
    say(
      `${id} ${o.customer.padEnd(8)} ${o.quantity} × ${o.sku} ${
        money(o.amountCents).padStart(7)
      } → ${res.status}, saga ${res.json.order.saga_id} (${o.story})`
    )
  }
  const again = await call("POST", "/orders", {
    orderId: placed[0]!.id,
    customer: "ada",
    sku: "book",
    quantity: 2,
    amountCents: 2_598
  })
  expectStatus("placing the same order again", again, 200)
  say(`${placed[0]!.id} placed again with the same orderId → ${again.status}: the same order, no second saga`)

  // ——— 2. progress: each saga's status as it changes ———
  say("— the sagas, as they progress (GET /orders/:id) —")
  const last = new Map<string, string>()
  const final = new Map<string, OrderJson>()
  await until("every saga to finish", async () => {
    for (const p of placed) {
      if (final.has(p.id)) continue
      const res = await call("GET", `/orders/${p.id}`)
      expectStatus(`GET /orders/${p.id}`, res, 200)
      const o = res.json as OrderJson
      const steps = o.saga.steps.map((s) => `${s.name}=${s.status}`).join(", ")
      const line = `${o.saga.status} (${steps})`
      if (last.get(p.id) !== line) {
        last.set(p.id, line)
        say(`${p.id} ${p.customer.padEnd(8)} saga ${line}${o.saga.error === null ? "" : `: ${o.saga.error}`}`)
      }
      if (o.order.status !== "pending") final.set(p.id, o)
    }
    return final.size
  }, (n) => n === placed.length)
  for (const p of placed) {
    const o = final.get(p.id)!
    if (o.order.status !== p.expect) {
      throw new DemoError(`${p.id} (${p.customer}) ended ${o.order.status}, expected ${p.expect}`)
    }
  }

  // ——— 3. the admin routes: a failed event, retried ———
  say("— the admin routes (bearer token) —")
  const anonymous = await call("GET", "/admin/outbox/failed")
  expectStatus("the admin route without a token", anonymous, 401)
  say(`GET /admin/outbox/failed without a token → ${anonymous.status}`)
  const id5 = `${runId}-5`
  const armed = await call("POST", "/admin/faults/publish", { type: "order.confirmed", aggregateId: id5 }, true)
  expectStatus("arming the fault switch", armed, 201)
  say(`fault switch: the broker will refuse the order.confirmed event of ${id5}`)
  const placed5 = await call("POST", "/orders", {
    orderId: id5,
    customer: "bob",
    sku: "book",
    quantity: 1,
    amountCents: 1_999
  })
  expectStatus(`placing ${id5}`, placed5, 202)
  say(`${id5} bob      1 × book   19.99 → ${placed5.status}`)
  const failed = await until(`the refused event of ${id5} in the outbox admin`, async () => {
    const res = await call("GET", "/admin/outbox/failed", undefined, true)
    expectStatus("GET /admin/outbox/failed", res, 200)
    return (res.json.events as Array<
      { id: string; type: string; aggregateId: string; lastError: string | null; attempts: number }
    >).find((e) => e.aggregateId === id5)
  }, (e) => e !== undefined)
  say(
    `GET /admin/outbox/failed → ${failed!.type} ${failed!.id} failed after ${failed!.attempts} attempt: ${
      failed!.lastError
    }`
  )
  const before = await call("GET", "/orders?customer=bob")
  const row5 = (before.json.orders as Array<ListRow>).find((r) => r.order_id === id5)
  say(`order list meanwhile: ${id5} is ${row5?.status ?? "absent"} (its confirmation never left the outbox)`)
  const retried = await call("POST", `/admin/outbox/failed/${failed!.id}/retry`, undefined, true)
  expectStatus("retrying the failed event", retried, 200)
  say(`POST /admin/outbox/failed/${failed!.id}/retry → ${retried.status} ${JSON.stringify(retried.json)}`)
  await until(`${id5} confirmed in the order list`, async () => {
    const res = await call("GET", "/orders?customer=bob")
    return (res.json.orders as Array<ListRow>).find((r) => r.order_id === id5)?.status
  }, (s) => s === "confirmed")
  say(`order list: ${id5} is confirmed once the retried event was published`)
  placed.push({ id: id5, customer: "bob", expect: "confirmed" })

  // ——— 4. the read side caught up with every order ———
  const list = await until("the order list to show every order's outcome", async () => {
    const res = await call("GET", "/orders")
    expectStatus("GET /orders", res, 200)
    return (res.json.orders as Array<ListRow>).filter((r) => r.order_id.startsWith(`${runId}-`))
  }, (rows) => placed.every((p) => rows.some((r) => r.order_id === p.id && r.status === p.expect)))

  // ——— 5. summary ———
  say("— summary —")
  say("sagas:")
  const sagas: Array<{ id: string; customer: string; status: string; saga: string }> = []
  for (const p of placed) {
    const o = (await call("GET", `/orders/${p.id}`)).json as OrderJson
    sagas.push({ id: p.id, customer: p.customer, status: o.order.status, saga: o.saga.status })
    const steps = o.saga.steps.map((s) => `${s.name}=${s.status}`).join(", ")
    say(
      `  ${p.id} ${p.customer.padEnd(8)} ${o.saga.status.padEnd(11)} ${steps}${
        o.saga.error === null ? "" : ` — ${o.saga.error}`
      }`
    )
  }
  const counts = await options.eventCounts()
  const byType = new Map<string, Array<string>>()
  for (const c of counts) byType.set(c.event_type, [...(byType.get(c.event_type) ?? []), `${c.n} ${c.status}`])
  say(`events (outbox): ${counts.reduce((n, c) => n + c.n, 0)} in all`)
  for (const [type, parts] of byType) say(`  ${type.padEnd(20)} ${parts.join(", ")}`)
  say("order list (the projection, GET /orders):")
  for (const r of list) {
    say(
      `  ${r.order_id} ${r.customer.padEnd(8)} ${r.quantity} × ${r.sku.padEnd(4)} ${
        money(r.amount_cents).padStart(7)
      } ${r.status}${r.reason === null ? "" : ` (${r.reason})`}`
    )
  }
  const stock = (await call("GET", "/stock")).json.stock as Array<{ sku: string; available: number }>
  say(`stock: ${stock.map((s) => `${s.sku} ${s.available}`).join(", ")}`)
  const metrics = await (await fetch(`${options.url}/metrics`, { signal: AbortSignal.timeout(10_000) })).text()
  const sum = (name: string, match = "") =>
    metrics.split("\n").filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `)).filter((l) =>
      l.includes(match)
    )
      .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(" ") + 1)), 0)
  say(`metrics (GET /metrics): ${
    [
      `tidings_outbox_published_total ${sum("tidings_outbox_published_total")}`,
      `tidings_saga_started_total ${sum("tidings_saga_started_total")}`,
      `tidings_saga_finished_total{status="completed"} ${sum("tidings_saga_finished_total", "status=\"completed\"")}`,
      `tidings_saga_finished_total{status="compensated"} ${
        sum("tidings_saga_finished_total", "status=\"compensated\"")
      }`,
      `tidings_consumer_retried_total ${sum("tidings_consumer_retried_total")}`
    ].join(", ")
  }`)
  const confirmed = sagas.filter((s) => s.status === "confirmed").length
  say(
    `done in ${((Date.now() - started) / 1000).toFixed(1)} s: ${sagas.length} orders, ${confirmed} confirmed, ${
      sagas.length - confirmed
    } cancelled by compensation, 1 refused event retried through the admin route`
  )
  return { orders: sagas, retriedEventId: failed!.id }
}
