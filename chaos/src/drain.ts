/**
 * Waiting for the system to drain after the last fault. Drained means: no outbox row is left to
 * publish (pending, processing or suspect), every committed order whose event was not failed has its
 * effect, and the consumers' work and retry queues are empty. Held twice in a row, half a second
 * apart; the drain time is measured from the last fault's end to the first of the two.
 *
 * The wait is bounded by progress, not by a clock a slow machine could hit: it gives up after
 * `stallSeconds` without any change in those numbers, counted from the later of the last change and
 * the next retry the outbox has scheduled (a relay backing off is progress to come); and after
 * `maxDrainSeconds` in any case, so that a run cannot hang.
 * @module
 */
import { sleep } from "./abort.ts"
import * as Amqp from "./amqp.ts"
import * as Db from "./db.ts"
import { log, seconds } from "./log.ts"
import type { Options } from "./options.ts"
import * as Tables from "./tables.ts"
import * as Topology from "./topology.ts"

/** One look at the system. */
export interface Snapshot {
  readonly committed: number
  /** Outbox rows pending, processing or suspect. */
  readonly unsettled: number
  readonly published: number
  readonly failed: number
  /** Committed orders without an effect whose outbox row is not failed. */
  readonly missing: number
  readonly effects: number
  /** Ready messages in the consumers' work and retry queues (-1: the broker could not be asked). */
  readonly queued: number
  /** When the soonest scheduled retry of a pending row is due (epoch ms), if any. */
  readonly nextDueAt: number | undefined
}

/** How the drain ended. */
export interface DrainResult {
  readonly drained: boolean
  /** From the last fault's end to drained (or to giving up). */
  readonly drainMs: number
  /** Why it gave up, when it did. */
  readonly reason: string | undefined
  readonly last: Snapshot
}

/** Takes a snapshot. */
export const snapshot = async (sql: Db.Sql, amqpUrl: string): Promise<Snapshot> => {
  const [row] = await sql<
    Array<{
      committed: number
      unsettled: number
      published: number
      failed: number
      missing: number
      effects: number
      next_due_ms: number | null
    }>
  >`SELECT
    (SELECT count(*)::int FROM ${sql(Tables.orders)}) AS committed,
    (SELECT count(*)::int FROM ${
    sql(`${Tables.tidingsSchema}.outbox`)
  } WHERE status IN ('pending', 'processing', 'suspect')) AS unsettled,
    (SELECT count(*)::int FROM ${sql(`${Tables.tidingsSchema}.outbox`)} WHERE status = 'published') AS published,
    (SELECT count(*)::int FROM ${sql(`${Tables.tidingsSchema}.outbox`)} WHERE status = 'failed') AS failed,
    (SELECT count(*)::int FROM ${sql(Tables.orders)} o
       JOIN ${sql(`${Tables.tidingsSchema}.outbox`)} x ON x.id = o.event_id
      WHERE x.status <> 'failed' AND NOT EXISTS (SELECT 1 FROM ${
    sql(Tables.effects)
  } e WHERE e.message_id = o.event_id::text)) AS missing,
    (SELECT count(*)::int FROM ${sql(Tables.effects)}) AS effects,
    (SELECT (extract(epoch FROM min(available_at)) * 1000)::float8 FROM ${
    sql(`${Tables.tidingsSchema}.outbox`)
  } WHERE status = 'pending') AS next_due_ms`
  const depths = await Amqp.depths(amqpUrl, Topology.inFlightQueues).catch(() => undefined)
  const values = depths === undefined ? [-1] : Object.values(depths)
  const queued = values.some((n) => n < 0) ? -1 : values.reduce((a, b) => a + b, 0)
  return {
    committed: row!.committed,
    unsettled: row!.unsettled,
    published: row!.published,
    failed: row!.failed,
    missing: row!.missing,
    effects: row!.effects,
    queued,
    nextDueAt: row!.next_due_ms === null ? undefined : Number(row!.next_due_ms)
  }
}

const isDrained = (s: Snapshot) => s.unsettled === 0 && s.missing === 0 && s.queued === 0

const progressKey = (s: Snapshot) => [s.unsettled, s.published, s.failed, s.missing, s.effects, s.queued].join("/")

/** `unsettled 12, missing 40, queued 3, failed 0` */
export const summary = (s: Snapshot): string =>
  `committed ${s.committed}, unsettled outbox rows ${s.unsettled}, published ${s.published}, failed ${s.failed}, effects ${s.effects}, committed without effect ${s.missing}, queued ${
    s.queued < 0 ? "?" : s.queued
  }`

/** Waits for the drain (see the module docs). */
export const waitForDrain = async (
  sql: Db.Sql,
  amqpUrl: string,
  lastFaultEnd: number,
  options: Options,
  signal: AbortSignal
): Promise<DrainResult> => {
  const started = Date.now()
  let lastProgress = started
  let key = ""
  let drainedAt: number | undefined
  let lastLog = 0
  for (;;) {
    const s = await Db.retrying("drain snapshot", () => snapshot(sql, amqpUrl), signal)
    const now = Date.now()
    if (isDrained(s)) {
      if (drainedAt !== undefined) {
        return { drained: true, drainMs: drainedAt - lastFaultEnd, reason: undefined, last: s }
      }
      drainedAt = now
    } else {
      drainedAt = undefined
    }
    if (progressKey(s) !== key) {
      key = progressKey(s)
      lastProgress = now
    }
    if (now - lastLog > 5000) {
      lastLog = now
      log(`draining (${seconds(now - lastFaultEnd)} after the last fault): ${summary(s)}`)
    }
    const expected = Math.max(lastProgress, s.nextDueAt ?? 0)
    if (now - expected > options.stallSeconds * 1000) {
      return {
        drained: false,
        drainMs: now - lastFaultEnd,
        reason: `no progress for ${options.stallSeconds} s and no retry scheduled`,
        last: s
      }
    }
    if (now - started > options.maxDrainSeconds * 1000) {
      const due = s.nextDueAt === undefined ? "" : ` (next outbox retry due in ${seconds(s.nextDueAt - now)})`
      return {
        drained: false,
        drainMs: now - lastFaultEnd,
        reason: `still not drained after ${options.maxDrainSeconds} s${due}`,
        last: s
      }
    }
    await sleep(500, signal)
  }
}
