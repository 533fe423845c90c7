// The Tidings console: plain JavaScript, no dependencies, built into @tidings/hono by
// packages/hono/scripts/build-console.ts. Data is rendered with DOM APIs only (textContent,
// attributes): nothing from the server is ever parsed as HTML.

const TOKEN_KEY = "tidings.console.token"
// The API is mounted next to this script, wherever the console is.
const root = new URL(".", import.meta.url)
const VIEWS = [
  ["overview", "Overview"],
  ["outbox", "Outbox"],
  ["inbox", "Inbox"],
  ["dlq", "Dead-letter queues"],
  ["sagas", "Sagas"],
  ["workers", "Relays & consumers"]
]

const state = {
  overview: null,
  data: null,
  expanded: new Set(),
  paused: false,
  timer: undefined,
  refreshMs: 2000,
  loading: false,
  again: false,
  outbox: { status: "failed", type: "" },
  inbox: { consumer: "" },
  sagas: { status: "", type: "" },
  dlqPeek: null
}

// ---- small DOM helpers ---------------------------------------------------------------------

const h = (tag, props, ...children) => {
  const el = document.createElement(tag)
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue
    if (key.startsWith("on")) el.addEventListener(key.slice(2).toLowerCase(), value)
    else if (key === "class") el.className = value
    else el.setAttribute(key, value === true ? "" : String(value))
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue
    el.append(child instanceof Node ? child : String(child))
  }
  return el
}

const SVG = "http://www.w3.org/2000/svg"
const svg = (tag, attrs, ...children) => {
  const el = document.createElementNS(SVG, tag)
  for (const [key, value] of Object.entries(attrs ?? {})) if (value !== undefined && value !== null) el.setAttribute(key, String(value))
  for (const child of children.flat(Infinity)) if (child !== undefined && child !== null && child !== false) el.append(child instanceof Node ? child : String(child))
  return el
}

const $ = (id) => document.getElementById(id)

const badge = (status) => h("span", { class: `badge ${status}` }, String(status).replace("_", " "))

const json = (value) => h("pre", null, JSON.stringify(value, null, 2))

const num = (n) => (n ?? 0).toLocaleString("en-US")

const duration = (ms) => {
  if (ms === null || ms === undefined) return "—"
  if (ms < 1000) return `${Math.round(ms)} ms`
  const s = ms / 1000
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`
  const hours = Math.floor(m / 60)
  return hours < 48 ? `${hours} h ${m % 60} min` : `${Math.floor(hours / 24)} d ${hours % 24} h`
}

const ago = (iso) => {
  if (!iso) return "—"
  const t = new Date(iso).getTime()
  const now = state.overview ? new Date(state.overview.now).getTime() : Date.now()
  return h("span", { title: new Date(t).toISOString() }, `${duration(Math.max(0, now - t))} ago`)
}

// The end of an id: UUIDv7s start with their timestamp, so ids of one minute share their start.
const short = (id) => h("span", { class: "mono", title: id }, `…${String(id).slice(-8)}`)

const empty = (text) => h("p", { class: "empty" }, text)

let toastTimer
const toast = (text, error = false) => {
  const el = $("toast")
  el.textContent = text
  el.className = `show${error ? " error" : ""}`
  clearTimeout(toastTimer)
  toastTimer = setTimeout(() => (el.className = ""), 4000)
}

// ---- the API -------------------------------------------------------------------------------

class Unauthorized extends Error {}

const api = async (path, options = {}) => {
  const token = sessionStorage.getItem(TOKEN_KEY)
  if (!token) throw new Unauthorized("no token")
  const response = await fetch(new URL(`api/${path}`, root), {
    method: options.method ?? "GET",
    credentials: "omit",
    cache: "no-store",
    headers: {
      authorization: `Bearer ${token}`,
      ...(options.body === undefined ? {} : { "content-type": "application/json" })
    },
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) })
  })
  const text = await response.text()
  let body
  try {
    body = text === "" ? undefined : JSON.parse(text)
  } catch {
    body = undefined
  }
  if (response.status === 401 || response.status === 403) throw new Unauthorized(body?.error?.message ?? "refused")
  if (!response.ok) throw new Error(body?.error?.message ?? `HTTP ${response.status}`)
  return body
}

// Buttons that change things: disabled while the request runs, then everything is reloaded.
const action = (label, run, options = {}) => {
  const button = h("button", { type: "button", class: options.class ?? "secondary", "data-action": options.name ?? label })
  button.textContent = label
  let armed = false
  let disarm
  button.addEventListener("click", async (event) => {
    event.stopPropagation()
    if (options.confirm && !armed) {
      armed = true
      button.textContent = options.confirm
      button.classList.add("armed")
      disarm = setTimeout(() => {
        armed = false
        button.textContent = label
        button.classList.remove("armed")
      }, 4000)
      return
    }
    clearTimeout(disarm)
    button.disabled = true
    try {
      const message = await run()
      if (message) toast(message)
    } catch (error) {
      if (error instanceof Unauthorized) return signIn("The token was refused.")
      toast(error.message, true)
    } finally {
      button.disabled = false
      await refresh()
    }
  })
  return button
}

// ---- views ---------------------------------------------------------------------------------

const card = (label, value, sub, tone) =>
  h("div", { class: `card${tone ? ` ${tone}` : ""}`, "data-card": label }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), sub ? h("div", { class: "sub" }, sub) : null)

const throughputChart = (points) => {
  // About as wide as the panel, so that the labels stay at their font size.
  const width = 1200
  const height = 190
  const pad = { left: 44, right: 12, top: 12, bottom: 26 }
  const max = Math.max(1, ...points.map((p) => p.published))
  const bw = (width - pad.left - pad.right) / Math.max(1, points.length)
  const y = (v) => pad.top + (height - pad.top - pad.bottom) * (1 - v / max)
  const every = Math.ceil(points.length / 8)
  return svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": "Events published per minute" },
    svg("line", { x1: pad.left, x2: width - pad.right, y1: y(0), y2: y(0) }),
    svg("line", { x1: pad.left, x2: width - pad.right, y1: y(max), y2: y(max) }),
    svg("text", { x: pad.left - 6, y: y(max) + 4, "text-anchor": "end" }, num(max)),
    svg("text", { x: pad.left - 6, y: y(0) + 4, "text-anchor": "end" }, "0"),
    points.map((p, i) => {
      const x = pad.left + i * bw + 1
      const top = y(p.published)
      const last = i === points.length - 1
      return svg("g", null,
        svg("rect", { class: `bar${last ? " now" : ""}`, x, y: top, width: Math.max(1, bw - 2), height: Math.max(0, y(0) - top) },
          svg("title", null, `${new Date(p.minute).toISOString().slice(11, 16)} UTC: ${p.published} published`)),
        (points.length - 1 - i) % every === 0
          ? svg("text", { x: last ? x + bw - 2 : x + bw / 2, y: height - 8, "text-anchor": last ? "end" : "middle" }, last ? "now" : new Date(p.minute).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }))
          : null)
    }))
}

const table = (headers, rows, emptyText) =>
  rows.length === 0 ? empty(emptyText) : h("table", null, h("thead", null, h("tr", null, headers.map((x) => h("th", { class: x.startsWith("#") ? "num" : null }, x.replace(/^#/, ""))))), h("tbody", null, rows))

const componentsPanel = (o) =>
  h("div", { class: "panel", "data-panel": "components" },
    h("h2", null, "Components"),
    table(["Name", "State", "Why"], o.components.map((c) =>
      h("tr", null, h("td", null, c.name), h("td", null, badge(c.status)), h("td", { class: "truncate" }, c.message ?? (c.status === "up" ? `answered in ${duration(c.durationMs)}` : "")))), "No readiness checks configured."))

const relaysPanel = (o) => {
  const local = o.relays.local
  return h("div", { class: "panel", "data-panel": "relays" },
    h("h2", null, "Relays"),
    local === null
      ? empty("No relay runs in this process.")
      : h("p", null, badge(local.running ? "running" : "down"), ` ${local.name} in this process: ${local.concurrency} poller${local.concurrency === 1 ? "" : "s"}, ${local.ordering}, ${local.dispatch} dispatch, batches of ${local.batchSize}; ${num(local.published)} published since start.`),
    h("h3", null, "Holding claims now (every process)"),
    table(["Holder", "#Events in flight", "Lease until", ""], o.relays.holders.map((x) =>
      h("tr", null, h("td", { class: "mono" }, x.holder), h("td", { class: "num" }, num(x.events)), h("td", null, new Date(x.claimedUntil).toLocaleTimeString()), h("td", null, x.local ? "this process" : ""))), "No relay holds a claim right now."))
}

const consumersPanel = (o) =>
  h("div", { class: "panel", "data-panel": "consumers" },
    h("h2", null, "Consumers"),
    table(["Consumer", "#In flight", "#Received", "#Acked", "#Retried", "#Dead-lettered", "#Inbox processing", "#Inbox failed"], o.consumers.map((c) =>
      h("tr", null,
        h("td", null, c.name),
        h("td", { class: "num" }, num(c.inFlight)),
        h("td", { class: "num" }, num(c.consumed)),
        h("td", { class: "num" }, num(c.acked)),
        h("td", { class: "num" }, num(c.retried)),
        h("td", { class: "num" }, num(c.deadLettered)),
        h("td", { class: "num" }, c.inbox ? num(c.inbox.processing) : "—"),
        h("td", { class: "num" }, c.inbox ? num(c.inbox.failed) : "—"))), "No consumer has received anything in this process yet."),
    h("p", { class: "note" }, "Counts since this process started; the inbox columns cover every process."))

const overviewView = (o) => {
  const out = o.outbox
  const parts = []
  if (out !== null) {
    const lastMinute = out.throughput.at(-2)?.published ?? 0
    parts.push(h("div", { class: "cards" },
      card("Pending", num(out.pending)),
      card("In flight", num(out.processing)),
      card("Published", num(out.published), `${num(lastMinute)} in the last full minute`),
      card("Failed", num(out.failed), out.failed > 0 ? "needs a person: see Outbox" : "none", out.failed > 0 ? "bad" : null),
      card("Suspect", num(out.suspect), "relay died mid-publish", out.suspect > 0 ? "warn" : null),
      card("Relay lag", duration(out.oldestPendingAgeMs), "age of the oldest pending event", (out.oldestPendingAgeMs ?? 0) > 60_000 ? "warn" : null),
      o.inbox === null ? null : card("Inbox dead letters", num(o.inbox.failed), `${num(o.inbox.processing)} in flight`, o.inbox.failed > 0 ? "bad" : null),
      o.sagas === null ? null : card("Sagas failed", num(o.sagas.failed), `${num(o.sagas.running + o.sagas.compensating)} active`, o.sagas.failed > 0 ? "bad" : null)))
    const total = out.throughput.reduce((n, p) => n + p.published, 0)
    parts.push(h("div", { class: "grid" },
      h("div", { class: "panel wide", "data-panel": "throughput" },
        h("h2", null, `Published per minute (last ${out.throughput.length} minutes: ${num(total)})`),
        throughputChart(out.throughput))))
  } else {
    parts.push(h("div", { class: "panel" }, empty("This app has no outbox store.")))
  }
  parts.push(h("div", { class: "grid" }, componentsPanel(o), relaysPanel(o)))
  if (o.sagas !== null) {
    parts.push(h("div", { class: "grid" },
      h("div", { class: "panel", "data-panel": "sagas" }, h("h2", null, "Sagas by status"),
        table(["Status", "#Sagas"], Object.entries(o.sagas).map(([status, n]) => h("tr", null, h("td", null, badge(status)), h("td", { class: "num" }, num(n)))), "")),
      consumersPanel(o)))
  } else {
    parts.push(h("div", { class: "grid" }, consumersPanel(o)))
  }
  return parts
}

const expander = (id, cells, details, columns) => {
  const open = state.expanded.has(id)
  const row = h("tr", {
    class: `clickable${open ? " selected" : ""}`,
    "data-id": id,
    onClick: () => {
      if (state.expanded.has(id)) state.expanded.delete(id)
      else state.expanded.add(id)
      render()
      // A saga's details are loaded with the list: fetch them now rather than at the next refresh.
      if (currentView() === "sagas" && state.expanded.has(id)) refresh()
    }
  }, cells)
  return open ? [row, h("tr", { class: "details" }, h("td", { colspan: columns }, details()))] : [row]
}

const eventDetails = (e) =>
  h("div", { class: "grid" },
    h("div", null, h("h3", null, "Payload"), json(e.payload)),
    h("div", null, h("h3", null, "Headers"), json(e.headers)),
    h("div", { class: "panel wide" },
      h("h3", null, `Last error (attempt ${e.attempts})`), h("pre", null, e.lastError ?? "—"),
      h("p", { class: "note" }, "The outbox keeps the error of the last attempt only; earlier attempts' errors are in the relay's logs."),
      h("p", { class: "note" }, `Aggregate ${e.aggregateType}/${e.aggregateId}, ordering key ${e.orderingKey}, version ${e.version}; occurred ${new Date(e.occurredAt).toISOString()}; due ${new Date(e.availableAt).toISOString()}${e.publishedAt ? `; published ${new Date(e.publishedAt).toISOString()}` : ""}.`)))

const outboxView = (o, data) => {
  const failedByType = o.outbox?.failedByType ?? []
  const statusSelect = h("select", { id: "outbox-status", onChange: (e) => ((state.outbox.status = e.target.value), refresh()) },
    ["failed", "pending", "processing", "suspect", "published"].map((s) => h("option", { value: s, selected: s === state.outbox.status }, s)))
  const typeInput = h("input", { id: "outbox-type", placeholder: "event type", value: state.outbox.type, onChange: (e) => ((state.outbox.type = e.target.value.trim()), refresh()) })
  return [
    h("div", { class: "grid" },
      h("div", { class: "panel", "data-panel": "failed-by-type" },
        h("h2", null, "Failed events by type"),
        table(["Type", "#Failed", ""], failedByType.map((t) =>
          h("tr", null, h("td", { class: "mono" }, t.type), h("td", { class: "num" }, num(t.count)),
            h("td", { class: "actions" }, action(`Retry all ${num(t.count)}`, async () => `Retried ${(await api("outbox/failed/retry", { method: "POST", body: { type: t.type } })).retried} ${t.type} events`, { name: "retry-type", confirm: `Retry ${num(t.count)}?` })))), "No failed events."))),
    h("div", { class: "panel", "data-panel": "events" },
      h("div", { class: "toolbar" }, h("h2", null, "Events"), h("span", { class: "spacer" }), "Status ", statusSelect, typeInput),
      table(["Id", "Type", "Aggregate", "Status", "#Attempts", "Last error", "Created", ""], data.events.flatMap((e) =>
        expander(e.id, [
          h("td", null, short(e.id)),
          h("td", { class: "mono" }, e.type),
          h("td", { class: "mono" }, `${e.aggregateType}/${e.aggregateId}`),
          h("td", null, badge(e.status)),
          h("td", { class: "num" }, num(e.attempts)),
          h("td", { class: "truncate", title: e.lastError ?? "" }, e.lastError ?? ""),
          h("td", null, ago(e.createdAt)),
          h("td", { class: "actions" }, e.status === "failed"
            ? [
              action("Retry", async () => `Retried ${(await api("outbox/failed/retry", { method: "POST", body: { ids: [e.id] } })).retried} event`, { class: "", name: "retry" }),
              action("Discard", async () => `Discarded ${(await api("outbox/failed/discard", { method: "POST", body: { ids: [e.id] } })).discarded} event`, { class: "danger", name: "discard", confirm: "Discard for good?" })
            ]
            : null)
        ], () => eventDetails(e), 8)), `No ${state.outbox.status} events${state.outbox.type ? ` of type ${state.outbox.type}` : ""}.`))
  ]
}

const inboxView = (o, data) => [
  h("div", { class: "panel", "data-panel": "inbox-dead-letters" },
    h("div", { class: "toolbar" }, h("h2", null, "Inbox dead letters"), h("span", { class: "spacer" }),
      h("input", { id: "inbox-consumer", placeholder: "consumer", value: state.inbox.consumer, onChange: (e) => ((state.inbox.consumer = e.target.value.trim()), refresh()) })),
    table(["Message", "Consumer", "#Attempts", "#Crashes", "Reason", "Received", ""], data.records.map((r) =>
      h("tr", null,
        h("td", null, short(r.messageId)),
        h("td", null, r.consumer),
        h("td", { class: "num" }, num(r.attempts)),
        h("td", { class: "num" }, num(r.crashes)),
        h("td", { class: "truncate", title: r.lastError ?? "" }, r.lastError ?? ""),
        h("td", null, ago(r.receivedAt)),
        h("td", { class: "actions" }, action("Replay", async () => {
          const result = await api("inbox/replay", { method: "POST", body: { messageId: r.messageId, consumer: r.consumer } })
          return result.requeued ? "Reset, and the event is published again from the outbox" : "Reset; the event is no longer in the outbox: replay the broker's dead-letter queue"
        }, { name: "replay" })))), "No dead-lettered messages."),
    h("p", { class: "note" }, "Replay forgets the consumer's failed row and, when the event is still in the outbox, publishes it again: consumers that handled it already skip it as a duplicate."))
]

const dlqRow = (q) =>
  h("tr", null,
    h("td", { class: "mono" }, q.name),
    h("td", { class: "mono" }, q.target),
    h("td", { class: "num" }, num(q.messages)),
    h("td", { class: "actions" },
      action("Peek", async () => {
        state.dlqPeek = { queue: q.name, messages: (await api(`dlq/${encodeURIComponent(q.name)}/messages?limit=20`)).messages }
      }, { name: "peek" }),
      q.messages > 0
        ? action(`Replay ${num(q.messages)}`, async () => {
          const { replayed } = await api(`dlq/${encodeURIComponent(q.name)}/replay`, { method: "POST", body: {} })
          return `Replayed ${num(replayed)} messages into ${q.target}`
        }, { class: "", name: "replay-queue", confirm: `Replay ${num(q.messages)}?` })
        : null))

const dlqView = (o) => {
  const d = o.deadLetterQueues
  if (d === null) return [h("div", { class: "panel" }, empty("No dead-letter queues are configured: pass deadLetterQueues to Console.routes (@tidings/rabbitmq's DeadLetters provides them)."))]
  const peek = state.dlqPeek
  return [
    h("div", { class: "panel", "data-panel": "dlq" },
      h("h2", null, "Broker dead-letter queues"),
      d.error ? h("p", { class: "error" }, d.error) : null,
      table(["Queue", "Replays into", "#Messages", ""], d.queues.map(dlqRow), "No dead-letter queues.")),
    peek === null ? null : h("div", { class: "panel", "data-panel": "dlq-messages" },
      h("h2", null, `First messages of ${peek.queue}`),
      table(["Message", "Type", "Reason", "Body"], peek.messages.map((m) =>
        h("tr", null,
          h("td", { class: "mono" }, m.messageId ?? "—"),
          h("td", { class: "mono" }, m.type ?? "—"),
          h("td", null, m.reason ?? "—"),
          h("td", { class: "truncate", title: m.body }, m.body))), "The queue is empty."))
  ]
}

const timelineChart = (detail) => {
  const saga = detail.saga
  const start = new Date(saga.createdAt).getTime()
  const active = saga.status === "running" || saga.status === "compensating"
  const end = Math.max(start + 1, new Date(saga.updatedAt).getTime(), ...detail.timeline.map((e) => (e.finishedAt ? new Date(e.finishedAt).getTime() : 0)), active ? new Date(state.overview.now).getTime() : 0)
  const width = 1200
  const label = 200
  const row = 30
  const x = (t) => label + ((width - label - 70) * (t - start)) / (end - start)
  return svg("svg", { class: "timeline", viewBox: `0 0 ${width} ${row * detail.timeline.length + 24}`, width: "100%", role: "img", "aria-label": "Saga timeline" },
    svg("text", { x: label, y: 12, class: "dim" }, "0"),
    svg("text", { x: width - 70, y: 12, class: "dim", "text-anchor": "end" }, duration(end - start)),
    detail.timeline.map((e, i) => {
      const y = 20 + i * row
      const from = e.startedAt ? new Date(e.startedAt).getTime() : null
      const to = e.finishedAt ? new Date(e.finishedAt).getTime() : e.current ? end : null
      return svg("g", null,
        svg("line", { x1: label, x2: width - 70, y1: y + row - 4, y2: y + row - 4 }),
        svg("text", { x: 0, y: y + 16 }, `${e.index + 1}. ${e.step}`),
        from === null ? svg("text", { x: label, y: y + 16, class: "dim" }, "not started") : svg("rect", { class: e.current === "action" ? "action" : e.status, x: x(from), y: y + 3, width: Math.max(3, x(to ?? from) - x(from)), height: row - 10, rx: 3 },
          svg("title", null, `${e.step}: ${e.status}${e.error ? ` — ${e.error}` : ""}`)),
        from === null ? null : svg("text", { x: Math.min(width - 66, x(to ?? from) + 6), y: y + 16, class: "dim" }, e.durationMs === null ? "" : duration(e.durationMs)))
    }))
}

const sagaDetail = (detail) => {
  const saga = detail.saga
  return h("div", { "data-panel": "saga-detail" },
    h("div", { class: "toolbar" },
      h("h2", null, `${saga.type} `, short(saga.id), " ", badge(saga.status)),
      h("span", { class: "spacer" }),
      saga.status === "failed"
        ? action("Retry compensation", async () => {
          await api(`sagas/${saga.id}/retry`, { method: "POST" })
          return `Saga ${saga.id.slice(0, 8)} is compensating again (the recovery worker picks it up)`
        }, { class: "", name: "retry-saga" })
        : null,
      saga.status === "running"
        ? action("Compensate", async () => {
          await api(`sagas/${saga.id}/compensate`, { method: "POST" })
          return `Saga ${saga.id.slice(0, 8)} will be compensated (the recovery worker picks it up)`
        }, { class: "danger", name: "compensate-saga", confirm: "Undo its steps?" })
        : null),
    saga.error ? h("p", { class: "error" }, saga.error) : null,
    timelineChart(detail),
    table(["Step", "Status", "#Attempts", "#Compensations", "Started", "Finished", "#Duration", "Error"], detail.timeline.map((e) =>
      h("tr", null, h("td", null, e.step), h("td", null, badge(e.status), e.current ? ` (${e.current} now)` : ""), h("td", { class: "num" }, num(e.attempts)), h("td", { class: "num" }, num(e.compensationAttempts)),
        h("td", null, e.startedAt ? new Date(e.startedAt).toLocaleTimeString() : "—"), h("td", null, e.finishedAt ? new Date(e.finishedAt).toLocaleTimeString() : "—"),
        h("td", { class: "num" }, duration(e.durationMs)), h("td", { class: "truncate", title: e.error ?? "" }, e.error ?? ""))), ""),
    h("h3", null, "Input"), json(saga.input),
    h("p", { class: "note" }, `Created ${new Date(saga.createdAt).toISOString()}, updated ${new Date(saga.updatedAt).toISOString()}, version ${saga.version}${saga.claimedBy ? `, executed by ${saga.claimedBy} until ${new Date(saga.claimedUntil).toISOString()}` : ""}. Retry and compensate hand the saga to the recovery worker.`))
}

const sagasView = (o, data) => {
  const statusSelect = h("select", { id: "saga-status", onChange: (e) => ((state.sagas.status = e.target.value), refresh()) },
    ["", "running", "compensating", "failed", "compensated", "completed"].map((s) => h("option", { value: s, selected: s === state.sagas.status }, s === "" ? "any status" : s)))
  const typeInput = h("input", { id: "saga-type", placeholder: "saga type", value: state.sagas.type, onChange: (e) => ((state.sagas.type = e.target.value.trim()), refresh()) })
  return [
    h("div", { class: "panel", "data-panel": "saga-list" },
      h("div", { class: "toolbar" }, h("h2", null, "Sagas"), h("span", { class: "spacer" }), statusSelect, typeInput),
      table(["Id", "Type", "Status", "Step", "Error", "Created", "Updated"], data.sagas.flatMap((s) =>
        expander(s.id, [
          h("td", null, short(s.id)), h("td", null, s.type), h("td", null, badge(s.status)), h("td", { class: "num" }, s.currentStep + 1),
          h("td", { class: "truncate", title: s.error ?? "" }, s.error ?? ""), h("td", null, ago(s.createdAt)), h("td", null, ago(s.updatedAt))
        ], () => data.details[s.id] ? sagaDetail(data.details[s.id]) : empty("loading…"), 7)), "No sagas match."))
  ]
}

const workersView = (o) => [h("div", { class: "grid" }, relaysPanel(o), componentsPanel(o)), h("div", { class: "grid" }, consumersPanel(o))]

// ---- loading and rendering -----------------------------------------------------------------

const currentView = () => {
  const name = location.hash.replace(/^#/, "")
  return VIEWS.some(([v]) => v === name) ? name : "overview"
}

const query = (params) => {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined) q.set(k, String(v))
  const s = q.toString()
  return s === "" ? "" : `?${s}`
}

const loaders = {
  overview: async () => ({}),
  workers: async () => ({}),
  dlq: async () => ({}),
  outbox: async () => api(`outbox/events${query({ status: state.outbox.status, type: state.outbox.type, limit: 100 })}`),
  inbox: async () => api(`inbox${query({ status: "failed", consumer: state.inbox.consumer, limit: 100 })}`),
  sagas: async () => {
    const list = await api(`sagas${query({ status: state.sagas.status, type: state.sagas.type, limit: 100 })}`)
    const details = {}
    for (const s of list.sagas) if (state.expanded.has(s.id)) details[s.id] = await api(`sagas/${s.id}`)
    return { ...list, details }
  }
}

const render = () => {
  const o = state.overview
  const view = currentView()
  const tabs = $("tabs")
  tabs.replaceChildren(...VIEWS.map(([name, label]) => {
    const count = o === null ? 0 : name === "outbox" ? o.outbox?.failed ?? 0 : name === "inbox" ? o.inbox?.failed ?? 0 : name === "sagas" ? o.sagas?.failed ?? 0 : name === "dlq" ? (o.deadLetterQueues?.queues ?? []).reduce((n, q) => n + q.messages, 0) : 0
    return h("a", { href: `#${name}`, "aria-current": name === view ? "page" : null }, label, count > 0 ? h("span", { class: "count" }, num(count)) : null)
  }))
  if (o === null || state.data === null) return
  const views = { overview: overviewView, outbox: outboxView, inbox: inboxView, dlq: dlqView, sagas: sagasView, workers: workersView }
  $("view").replaceChildren(...[views[view](o, state.data)].flat(Infinity).filter(Boolean))
  $("view").dataset.view = view
}

const refresh = async () => {
  if (state.loading) {
    state.again = true
    return
  }
  state.loading = true
  state.again = false
  clearTimeout(state.timer)
  try {
    const view = currentView()
    const [overview, data] = await Promise.all([api("overview"), loaders[view]()])
    state.overview = overview
    state.data = data
    state.refreshMs = overview.refreshIntervalMs
    $("live").className = state.paused ? "live paused" : "live"
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`
    render()
  } catch (error) {
    if (error instanceof Unauthorized) {
      state.loading = false
      return signIn(sessionStorage.getItem(TOKEN_KEY) ? "The token was refused." : undefined)
    }
    $("live").className = "live down"
    $("updated").textContent = `refresh failed: ${error.message}`
  } finally {
    state.loading = false
  }
  if (state.again) return refresh()
  if (!state.paused) state.timer = setTimeout(refresh, state.refreshMs)
}

const signIn = (message) => {
  clearTimeout(state.timer)
  sessionStorage.removeItem(TOKEN_KEY)
  const dialog = $("login")
  const error = $("login-error")
  error.hidden = message === undefined
  error.textContent = message ?? ""
  if (!dialog.open) dialog.showModal()
  $("token").focus()
}

const start = () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault()
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim())
    $("token").value = ""
    $("login").close()
    refresh()
  })
  $("login").addEventListener("cancel", (event) => event.preventDefault())
  $("signout").addEventListener("click", () => {
    state.overview = null
    state.data = null
    $("view").replaceChildren()
    signIn()
  })
  $("pause").addEventListener("click", () => {
    state.paused = !state.paused
    $("pause").textContent = state.paused ? "Resume" : "Pause"
    $("live").className = state.paused ? "live paused" : "live"
    if (!state.paused) refresh()
    else clearTimeout(state.timer)
  })
  window.addEventListener("hashchange", () => {
    state.data = null
    state.dlqPeek = null
    refresh()
  })
  if (sessionStorage.getItem(TOKEN_KEY)) refresh()
  else signIn()
}

start()
