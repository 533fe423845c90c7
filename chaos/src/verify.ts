/**
 * The final checks, once every worker has stopped: the database (orders, rollbacks, effects, outbox,
 * inbox) against what the broker holds (the audit queue's copy of every confirmed publish, and the
 * dead-letter queue). Each finding carries enough to point at a cause: a lost event comes with its
 * outbox row, its inbox row, how often the broker saw it published and whether it was dead-lettered.
 * @module
 */
import type { ConsumeMessage } from "amqplib"
import * as Amqp from "./amqp.ts"
import type * as Db from "./db.ts"
import * as Malformed from "./malformed.ts"
import * as Tables from "./tables.ts"
import * as Topology from "./topology.ts"

/** A committed order without an effect, and where its event got to. */
export interface LostEvent {
  readonly orderId: string
  readonly eventId: string
  readonly committedAt: string
  readonly outbox: {
    readonly status: string
    readonly attempts: number
    readonly finishedAttempts: number
    readonly lastError: string | null
    readonly claimedBy: string | null
    readonly availableAt: string
    readonly publishedAt: string | null
  } | null
  readonly inbox: {
    readonly status: string
    readonly attempts: number
    readonly crashes: number
    readonly lastError: string | null
    /** The inbox instance id of the process that started the last attempt. */
    readonly startedBy: string | null
  } | null
  /** Copies the broker confirmed (audit queue). */
  readonly publishedCopies: number
  /** How it got to the dead-letter queue (its `x-death` history, latest first), if it is there. */
  readonly deadLetter: string | undefined
  /** The queues still holding a copy at the end (work or retry queues), if any. */
  readonly stillQueued: ReadonlyArray<string>
  /** Whether it had its effect (for failed outbox rows, which may have been delivered before failing). */
  readonly effected: boolean
}

/** An event id that was handled or published without a committed order. */
export interface Phantom {
  readonly eventId: string
  readonly orderId: string | undefined
  readonly rolledBack: boolean
  readonly where: ReadonlyArray<"effect" | "published" | "outbox">
}

/** A message whose effect happened more than once. */
export interface Duplicate {
  readonly messageId: string
  readonly orderId: string
  readonly effects: ReadonlyArray<
    { readonly consumer: string; readonly pid: number; readonly attempt: number; readonly at: string }
  >
}

/** A dead letter that is not one of the malformed messages. */
export interface UnexpectedDeadLetter {
  readonly messageId: string | undefined
  readonly type: string | undefined
  /** Its `x-death` history, latest first: `rejected from chaos.effects ← expired from chaos.effects.retry.5000`. */
  readonly history: string
}

export interface Findings {
  readonly committed: number
  readonly rolledBack: number
  readonly outbox: Readonly<Record<string, number>>
  readonly failedReasons: ReadonlyArray<{ readonly reason: string; readonly count: number }>
  /**
   * Outbox rows that took more than one publish attempt, by their last error: the evidence that
   * broker and database outages count no attempt (a relay killed or paused past its lease does).
   */
  readonly retried: {
    readonly count: number
    readonly maxAttempts: number
    readonly reasons: ReadonlyArray<{ readonly reason: string; readonly count: number }>
  }
  readonly effects: { readonly rows: number; readonly messages: number }
  /** Committed, no effect, and the outbox does not hold the event as failed: nobody will deliver it. */
  readonly lost: { readonly count: number; readonly events: ReadonlyArray<LostEvent> }
  /** Outbox rows that failed (kept for a manual retry), whether or not their event got through before. */
  readonly failedRows: { readonly count: number; readonly events: ReadonlyArray<LostEvent> }
  readonly phantom: { readonly count: number; readonly events: ReadonlyArray<Phantom> }
  readonly duplicates: {
    readonly count: number
    readonly extraEffects: number
    readonly messages: ReadonlyArray<Duplicate>
  }
  readonly inbox: {
    readonly byStatus: Readonly<Record<string, number>>
    readonly failed: ReadonlyArray<{ readonly messageId: string; readonly lastError: string | null }>
  }
  /** `auditComplete`: the audit, dead-letter, work and retry queues were read out completely. */
  readonly published: {
    readonly copies: number
    readonly events: number
    readonly republished: number
    readonly auditComplete: boolean
  }
  readonly malformed: {
    readonly published: number
    readonly deadLettered: number
    /** Handled as if valid (an effect row exists). */
    readonly handled: ReadonlyArray<string>
    /** Neither dead-lettered nor handled. */
    readonly vanished: ReadonlyArray<string>
  }
  readonly deadLetters: { readonly total: number; readonly unexpected: ReadonlyArray<UnexpectedDeadLetter> }
}

/** At most this many examples of each finding are kept. */
const LIMIT = 200

const header = (m: ConsumeMessage, name: string): string | undefined => {
  const v = m.properties.headers?.[name]
  return v === undefined || v === null ? undefined : String(v)
}

/** `rejected from chaos.effects ← expired from chaos.effects.retry.5000 (×2)`, from the `x-death` header (latest first). */
const deathHistory = (m: ConsumeMessage): string => {
  const deaths = m.properties.headers?.["x-death"]
  if (!Array.isArray(deaths) || deaths.length === 0) {
    return `${header(m, "x-first-death-reason") ?? "?"} from ${header(m, "x-first-death-queue") ?? "?"}`
  }
  return deaths.map((d: { reason?: unknown; queue?: unknown; count?: unknown }) =>
    `${String(d.reason)} from ${String(d.queue)}${Number(d.count) > 1 ? ` (×${String(d.count)})` : ""}`
  ).join(" ← ")
}

const orderIdOf = (m: ConsumeMessage): string | undefined => {
  try {
    const body = JSON.parse(m.content.toString("utf8")) as { orderId?: unknown }
    return typeof body.orderId === "string" ? body.orderId : undefined
  } catch {
    return undefined
  }
}

/** Runs every check; `malformedIds` are the malformed messages the broker confirmed. */
export const run = async (sql: Db.Sql, amqpUrl: string, malformedIds: ReadonlyArray<string>): Promise<Findings> => {
  const outboxTable = sql(`${Tables.tidingsSchema}.outbox`)
  const inboxTable = sql(`${Tables.tidingsSchema}.inbox`)
  const orders = sql(Tables.orders)
  const effects = sql(Tables.effects)

  // The broker's side first: nothing publishes any more.
  const auditTaken = await Amqp.takeAll(amqpUrl, Topology.auditQueue)
  const audit = auditTaken.messages
  const deadTaken = await Amqp.takeAll(amqpUrl, Topology.consumerQueue.deadLetterQueue)
  const dead = deadTaken.messages
  const copies = new Map<string, { n: number; orderId: string | undefined }>()
  for (const m of audit) {
    const id = String(m.properties.messageId)
    const entry = copies.get(id) ?? { n: 0, orderId: orderIdOf(m) }
    entry.n++
    copies.set(id, entry)
  }
  const deadById = new Map(dead.map((m) => [String(m.properties.messageId), deathHistory(m)]))
  const deadIds = new Set(deadById.keys())
  // What is still on its way: a lost event found here was stuck, not gone.
  const queuedIn = new Map<string, Array<string>>()
  let queuesComplete = true
  for (const queue of Topology.inFlightQueues) {
    const taken = await Amqp.takeAll(amqpUrl, queue)
    if (taken.messages.length < taken.held) queuesComplete = false
    for (const m of taken.messages) {
      const id = String(m.properties.messageId)
      queuedIn.set(id, [...(queuedIn.get(id) ?? []), queue])
    }
  }

  const committedRows = await sql<
    Array<{ event_id: string; order_id: string }>
  >`SELECT event_id::text, order_id FROM ${orders}`
  const committedIds = new Set(committedRows.map((r) => r.event_id))
  const rolledBackRows = await sql<
    Array<{ event_id: string; order_id: string }>
  >`SELECT event_id::text, order_id FROM ${sql(Tables.rollbacks)}`
  const rolledBackIds = new Set(rolledBackRows.map((r) => r.event_id))

  const outboxCounts = await sql<
    Array<{ status: string; n: number }>
  >`SELECT status, count(*)::int AS n FROM ${outboxTable} GROUP BY status`
  const failedReasons = await sql<Array<{ reason: string; count: number }>>`
    SELECT coalesce(left(last_error, 300), '(none)') AS reason, count(*)::int AS count FROM ${outboxTable}
    WHERE status = 'failed' GROUP BY 1 ORDER BY 2 DESC LIMIT 10`
  const retriedReasons = await sql<Array<{ reason: string; count: number }>>`
    SELECT coalesce(left(last_error, 300), '(none)') AS reason, count(*)::int AS count FROM ${outboxTable}
    WHERE attempts > 1 GROUP BY 1 ORDER BY 2 DESC LIMIT 10`
  const [retriedTotals] = await sql<Array<{ count: number; max_attempts: number }>>`
    SELECT count(*) FILTER (WHERE attempts > 1)::int AS count, coalesce(max(attempts), 0)::int AS max_attempts FROM ${outboxTable}`
  const [effectCounts] = await sql<Array<{ rows: number; messages: number }>>`
    SELECT count(*)::int AS rows, count(DISTINCT message_id)::int AS messages FROM ${effects}`

  const lostRows = await sql<
    Array<{
      order_id: string
      event_id: string
      committed_at: Date
      status: string | null
      attempts: number | null
      finished_attempts: number | null
      last_error: string | null
      claimed_by: string | null
      available_at: Date | null
      published_at: Date | null
      inbox_status: string | null
      inbox_attempts: number | null
      inbox_crashes: number | null
      inbox_error: string | null
      inbox_started_by: string | null
    }>
  >`
    SELECT o.order_id, o.event_id::text, o.committed_at, x.status, x.attempts, x.finished_attempts, x.last_error,
           x.claimed_by, x.available_at, x.published_at,
           i.status AS inbox_status, i.attempts AS inbox_attempts, i.crashes AS inbox_crashes, i.last_error AS inbox_error,
           i.started_by AS inbox_started_by
      FROM ${orders} o
      LEFT JOIN ${outboxTable} x ON x.id = o.event_id
      LEFT JOIN ${inboxTable} i ON i.message_id = o.event_id::text AND i.consumer = ${Tables.inboxConsumer}
     WHERE x.status = 'failed' OR NOT EXISTS (SELECT 1 FROM ${effects} e WHERE e.message_id = o.event_id::text)
     ORDER BY o.committed_at`
  const effectedIds = new Set((await sql<Array<{ message_id: string }>>`
    SELECT DISTINCT e.message_id FROM ${effects} e JOIN ${outboxTable} x ON x.id::text = e.message_id WHERE x.status = 'failed'`)
    .map((r) => r.message_id))
  const missing: Array<LostEvent> = lostRows.map((r) => ({
    orderId: r.order_id,
    eventId: r.event_id,
    committedAt: r.committed_at.toISOString(),
    outbox: r.status === null ? null : {
      status: r.status,
      attempts: r.attempts ?? 0,
      finishedAttempts: r.finished_attempts ?? 0,
      lastError: r.last_error,
      claimedBy: r.claimed_by,
      availableAt: r.available_at?.toISOString() ?? "",
      publishedAt: r.published_at?.toISOString() ?? null
    },
    inbox: r.inbox_status === null ? null : {
      status: r.inbox_status,
      attempts: r.inbox_attempts ?? 0,
      crashes: r.inbox_crashes ?? 0,
      lastError: r.inbox_error,
      startedBy: r.inbox_started_by
    },
    publishedCopies: copies.get(r.event_id)?.n ?? 0,
    deadLetter: deadById.get(r.event_id),
    stillQueued: queuedIn.get(r.event_id) ?? [],
    effected: effectedIds.has(r.event_id)
  }))

  const lost = missing.filter((e) => e.outbox?.status !== "failed")
  const failedRows = missing.filter((e) => e.outbox?.status === "failed")

  // Phantoms: anything handled, published or in the outbox without a committed order.
  const phantoms = new Map<string, { orderId: string | undefined; where: Set<"effect" | "published" | "outbox"> }>()
  const phantom = (eventId: string, orderId: string | undefined, where: "effect" | "published" | "outbox") => {
    const entry = phantoms.get(eventId) ?? { orderId, where: new Set() }
    entry.where.add(where)
    phantoms.set(eventId, entry)
  }
  const effectIds = await sql<
    Array<{ message_id: string; order_id: string }>
  >`SELECT DISTINCT message_id, order_id FROM ${effects}`
  const handledMalformed: Array<string> = []
  for (const e of effectIds) {
    if (Malformed.kindOf(e.message_id) !== undefined) handledMalformed.push(e.message_id)
    else if (!committedIds.has(e.message_id)) phantom(e.message_id, e.order_id, "effect")
  }
  for (const [id, c] of copies) if (!committedIds.has(id)) phantom(id, c.orderId, "published")
  const strayRows = await sql<Array<{ id: string; order_id: string | null }>>`
    SELECT x.id::text, x.payload->>'orderId' AS order_id FROM ${outboxTable} x
     WHERE NOT EXISTS (SELECT 1 FROM ${orders} o WHERE o.event_id = x.id)`
  for (const r of strayRows) phantom(r.id, r.order_id ?? undefined, "outbox")

  const duplicateRows = await sql<
    Array<{ message_id: string; order_id: string; n: number; effects: Duplicate["effects"] }>
  >`
    SELECT message_id, order_id, count(*)::int AS n,
           json_agg(json_build_object('consumer', consumer, 'pid', pid, 'attempt', attempt, 'at', at) ORDER BY at) AS effects
      FROM ${effects} GROUP BY message_id, order_id HAVING count(*) > 1 ORDER BY message_id`

  const inboxCounts = await sql<Array<{ status: string; n: number }>>`
    SELECT status, count(*)::int AS n FROM ${inboxTable} WHERE consumer = ${Tables.inboxConsumer} GROUP BY status`
  const inboxFailed = await sql<Array<{ message_id: string; last_error: string | null }>>`
    SELECT message_id, last_error FROM ${inboxTable} WHERE consumer = ${Tables.inboxConsumer} AND status = 'failed' LIMIT ${LIMIT}`

  const malformedDead = malformedIds.filter((id) => deadIds.has(id))
  const vanished = malformedIds.filter((id) => !deadIds.has(id) && !handledMalformed.includes(id))
  const unexpected: Array<UnexpectedDeadLetter> = dead
    .filter((m) => Malformed.kindOf(String(m.properties.messageId)) === undefined)
    .map((m) => ({
      messageId: m.properties.messageId === undefined ? undefined : String(m.properties.messageId),
      type: m.properties.type === undefined ? undefined : String(m.properties.type),
      history: deathHistory(m)
    }))

  const phantomList = [...phantoms].map(([eventId, p]): Phantom => ({
    eventId,
    orderId: p.orderId,
    rolledBack: rolledBackIds.has(eventId),
    where: [...p.where]
  }))
  return {
    committed: committedRows.length,
    rolledBack: rolledBackRows.length,
    outbox: Object.fromEntries(outboxCounts.map((r) => [r.status, r.n])),
    failedReasons,
    retried: { count: retriedTotals!.count, maxAttempts: retriedTotals!.max_attempts, reasons: retriedReasons },
    effects: { rows: effectCounts!.rows, messages: effectCounts!.messages },
    lost: { count: lost.length, events: lost.slice(0, LIMIT) },
    failedRows: { count: failedRows.length, events: failedRows.slice(0, LIMIT) },
    phantom: { count: phantomList.length, events: phantomList.slice(0, LIMIT) },
    duplicates: {
      count: duplicateRows.length,
      extraEffects: duplicateRows.reduce((n, r) => n + r.n - 1, 0),
      messages: duplicateRows.slice(0, LIMIT).map((r) => ({
        messageId: r.message_id,
        orderId: r.order_id,
        effects: r.effects
      }))
    },
    inbox: {
      byStatus: Object.fromEntries(inboxCounts.map((r) => [r.status, r.n])),
      failed: inboxFailed.map((r) => ({ messageId: r.message_id, lastError: r.last_error }))
    },
    published: {
      copies: audit.length,
      events: copies.size,
      republished: [...copies.values()].filter((c) => c.n > 1).length,
      auditComplete: audit.length >= auditTaken.held && dead.length >= deadTaken.held && queuesComplete
    },
    malformed: {
      published: malformedIds.length,
      deadLettered: malformedDead.length,
      handled: handledMalformed,
      vanished
    },
    deadLetters: { total: dead.length, unexpected: unexpected.slice(0, LIMIT) }
  }
}
