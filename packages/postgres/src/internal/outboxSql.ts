/**
 * The SQL of the Postgres outbox store: the claim (unordered, and per key with a skip scan over the
 * keys), the settle and settle-and-claim statements, lease recovery, suspects, retention and the
 * admin queries. Every batch operation is one statement, with its rows passed as one JSON parameter
 * so that no driver-specific array binding is needed.
 * @internal
 */
import type { ClaimedEvent, ClaimOptions, Ordering, Settlement } from "@tidings/core/OutboxStore"
import { Duration } from "effect"
import type { SqlClient } from "effect/sql"
import { type OutboxRow, toMessage } from "./outboxRow.ts"

export interface ClaimRow extends OutboxRow {
  readonly seq: string | number
  readonly tx_id: string
  readonly created_at_ms: number | string
  readonly attempts: number
  readonly last_error?: string | null
}

const columns = (t: string) =>
  `${t}.id, ${t}.seq, ${t}.tx_id::text AS tx_id, ${t}.event_type, ${t}.event_version, ${t}.aggregate_type, ${t}.aggregate_id,
  ${t}.ordering_key, ${t}.payload::text AS payload, ${t}.headers::text AS headers,
  (extract(epoch FROM ${t}.occurred_at) * 1000)::float8 AS occurred_at_ms,
  (extract(epoch FROM ${t}.created_at) * 1000)::float8 AS created_at_ms, ${t}.attempts`

export const seconds = (d: Duration.Duration) => Duration.toMillis(d) / 1000

export const toClaimed = (rows: ReadonlyArray<ClaimRow>, ordering?: ClaimOptions["ordering"]): Array<ClaimedEvent> =>
  [...rows].sort(ordering === "per-key" ? byKeyOrder : bySeq).map((row) => ({
    message: toMessage(row),
    attempts: Number(row.attempts),
    createdAt: new Date(Number(row.created_at_ms))
  }))

// Rows come back from RETURNING in no particular order: restore (key, tx_id, seq) for per-key
// batches and append order otherwise.
const bySeq = (a: ClaimRow, b: ClaimRow) => Number(a.seq) - Number(b.seq)
const byKeyOrder = (a: ClaimRow, b: ClaimRow) =>
  a.ordering_key < b.ordering_key ? -1 : a.ordering_key > b.ordering_key ?
    1 :
    BigInt(a.tx_id) < BigInt(b.tx_id) ?
    -1 :
    BigInt(a.tx_id) > BigInt(b.tx_id) ?
    1 :
    Number(a.seq) - Number(b.seq)

export interface SettlementRow {
  readonly id: string
  readonly status: string
  readonly delay_ms: number
  readonly error: string | null
  readonly released: boolean
}

export const settlementRows = (settlement: Settlement): Array<SettlementRow> => [
  ...settlement.published.map((id) => ({ id, status: "published", delay_ms: 0, error: null, released: false })),
  ...settlement.retry.map((r) => ({
    id: r.id,
    status: "pending",
    delay_ms: Duration.toMillis(r.delay),
    error: r.error,
    released: false
  })),
  ...settlement.failed.map((f) => ({ id: f.id, status: "failed", delay_ms: 0, error: f.error, released: false })),
  ...(settlement.released ?? []).map((id) => ({ id, status: "pending", delay_ms: 0, error: null, released: true }))
]

/** The statements of one schema's outbox. */
export const outboxSql = (sql: SqlClient.SqlClient, schema: string, bookkeepingCommit: "async" | "sync" = "async") => {
  const outbox = sql(`${schema}.outbox`)
  const cols = sql.literal(columns("o"))
  const xmin = sql.literal("pg_snapshot_xmin(pg_current_snapshot())")
  const unsettled = sql.literal("('pending', 'processing', 'suspect')")

  // The CTEs choosing the rows to claim, ending in one named `picked (id)`. `afterSettle`: the
  // statement also settles (a CTE named `settled`), and must finish that before it locks rows to
  // claim. A concurrent claim can hold the lock of a row we settle: its SKIP LOCKED scan, whose
  // snapshot still saw the row pending, locks the newest version before rechecking it and keeps
  // the lock to its end. Waiting for that lock while holding our own new claim's locks can close a
  // cycle, which Postgres breaks only after `deadlock_timeout` (a one-second stall and an aborted
  // statement). Settling first, a statement waits only while it holds no claim lock, and a claim
  // in progress never waits (SKIP LOCKED), so no cycle can form. The gate is an InitPlan: a
  // one-time filter evaluated before the scan starts.
  const claimCtes = (options: ClaimOptions, afterSettle = false) => {
    const gate = afterSettle ? sql`AND (SELECT count(*) FROM settled) >= 0` : sql``
    // Literal limits: a generic plan for `LIMIT $n` assumes a tenth of the table, and can pick a
    // plan that reads far more than the batch (prepared statements switch to generic plans).
    const limit = (n: number) => sql.literal(String(Math.max(1, Math.trunc(n))))
    const batch = limit(options.batchSize)
    if (options.ordering !== "per-key") {
      return sql`picked AS (
        SELECT id FROM ${outbox}
        WHERE status = 'pending' AND available_at <= now() ${gate}
        ORDER BY available_at, seq
        LIMIT ${batch}
        FOR UPDATE SKIP LOCKED
      )`
    }
    // Per key, the head is the first unsettled event in (tx_id, seq) order. A key is claimable when
    // its head is pending, due, and written by a transaction older than every running one (so no
    // earlier event of the key can still commit). Heads are found with a skip scan over the index
    // of unsettled rows, (ordering_key, tx_id, seq), one probe per key, from after the relay's last
    // key, so the cost follows the number of keys,
    // not of events, and concurrent relays spread over the key space. Each locked key contributes
    // its fair share of the batch, so a claim reads about `batchSize` rows however long runs are.
    return sql`heads AS (
        (SELECT o.ordering_key, o.id, o.status, o.available_at, o.tx_id FROM ${outbox} o
          WHERE o.status IN ${unsettled} AND o.ordering_key > ${options.afterKey ?? ""}
          ORDER BY o.ordering_key, o.tx_id, o.seq LIMIT 1)
        UNION ALL
        SELECT n.ordering_key, n.id, n.status, n.available_at, n.tx_id FROM heads h
        CROSS JOIN LATERAL (
          SELECT o.ordering_key, o.id, o.status, o.available_at, o.tx_id FROM ${outbox} o
          WHERE o.status IN ${unsettled} AND o.ordering_key > h.ordering_key
          ORDER BY o.ordering_key, o.tx_id, o.seq LIMIT 1
        ) n
      ),
      eligible AS (
        SELECT id FROM heads
        WHERE status = 'pending' AND available_at <= now() AND tx_id < ${xmin}
        LIMIT ${limit(options.batchSize * 2)}
      ),
      locked AS (
        SELECT o.id, o.ordering_key FROM ${outbox} o
        WHERE o.id IN (SELECT id FROM eligible) AND o.status = 'pending' ${gate}
        ORDER BY o.ordering_key
        LIMIT ${batch}
        FOR UPDATE SKIP LOCKED
      ),
      runs AS (
        SELECT r.id, l.ordering_key, r.tx_id, r.seq FROM locked l
        CROSS JOIN LATERAL (
          SELECT s.id, s.tx_id, s.seq, bool_and(s.ok) OVER (ORDER BY s.tx_id, s.seq) AS ok FROM (
            SELECT o.id, o.tx_id, o.seq, (o.status = 'pending' AND o.available_at <= now() AND o.tx_id < ${xmin}) AS ok
            FROM ${outbox} o
            WHERE o.ordering_key = l.ordering_key AND o.status IN ${unsettled}
            ORDER BY o.tx_id, o.seq LIMIT (SELECT greatest(1, ceil(${batch}::float8 / greatest(count(*), 1)))::int FROM locked)
          ) s
        ) r
        WHERE r.ok
      ),
      picked AS (
        SELECT id FROM runs ORDER BY ordering_key, tx_id, seq LIMIT ${batch}
      )`
  }

  // `set_config(..., true)` lasts for the statement's own transaction, so only this commit is
  // asynchronous. Joined by every writing part, so it runs whenever the statement writes.
  const commitMode = bookkeepingCommit === "sync"
    ? sql.literal("commit_mode AS MATERIALIZED (SELECT 1 AS on)")
    : sql.literal("commit_mode AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) AS on)")

  // The picked ids as an array: the primary key finds each row. A join with `picked` lets the
  // planner hash it against a scan of the whole table (about 3× slower for 500 rows of 60,000).
  const claimUpdate = (options: ClaimOptions) =>
    sql`UPDATE ${outbox} o SET status = 'processing', attempts = o.attempts + 1, claimed_by = ${options.relayId},
        claimed_until = now() + make_interval(secs => ${seconds(options.lease)})
      FROM commit_mode WHERE o.id = ANY(ARRAY(SELECT id FROM picked))
      RETURNING ${cols}`

  // Settles rows still claimed by this relay; `released` rows go back without counting the attempt.
  // Rows are found by primary key (`id = ANY(array)`) and `claimed_by` alone: a claimed row is a
  // 'processing' row (migration 0005 checks it), and a `status = 'processing'` condition would let
  // the planner scan the processing index instead, which holds a dead entry for every event since
  // the last vacuum (measured: 7 ms instead of 0.1 ms, and PostgreSQL CPU per settle growing with
  // the traffic).
  const settleCte = (relayId: string, rows: ReadonlyArray<SettlementRow>) => {
    const ids = `{${rows.map((r) => r.id).join(",")}}`
    if (rows.every((r) => r.status === "published")) {
      // The common case, kept lean: one array parameter, no per-row record to unpack.
      return sql`settled AS (
        UPDATE ${outbox} o SET status = 'published', published_at = now(), finished_attempts = o.finished_attempts + 1,
          claimed_by = NULL, claimed_until = NULL
        FROM commit_mode
        WHERE o.id = ANY(${ids}::text::uuid[]) AND o.claimed_by = ${relayId}
        RETURNING 1
      )`
    }
    // A released row goes back without counting the claim's attempt; one whose count then still
    // shows an unfinished attempt (an earlier crash) stays a suspect, isolated.
    return sql`settled AS (
      UPDATE ${outbox} o SET
        status = CASE WHEN v.released AND o.attempts - 1 > o.finished_attempts THEN 'suspect' ELSE v.status END,
        published_at = CASE WHEN v.status = 'published' THEN now() ELSE o.published_at END,
        available_at = CASE WHEN v.status = 'pending' THEN now() + make_interval(secs => v.delay_ms / 1000.0) ELSE o.available_at END,
        last_error = COALESCE(v.error, o.last_error),
        attempts = CASE WHEN v.released THEN greatest(o.attempts - 1, 0) ELSE o.attempts END,
        finished_attempts = CASE WHEN v.released THEN o.finished_attempts ELSE o.finished_attempts + 1 END,
        claimed_by = NULL,
        claimed_until = NULL
      FROM json_to_recordset(${
      JSON.stringify(rows)
    }::json) AS v(id uuid, status text, delay_ms float8, error text, released boolean), commit_mode
      WHERE o.id = ANY(${ids}::text::uuid[]) AND o.id = v.id AND o.claimed_by = ${relayId}
      RETURNING 1
    )`
  }

  /** Claims a batch (one statement, one commit). */
  const claim = (options: ClaimOptions) =>
    sql<ClaimRow>`WITH RECURSIVE ${commitMode}, ${claimCtes(options)} ${claimUpdate(options)}`

  /** Settles rows still claimed by `relayId`; returns how many. */
  const settle = (relayId: string, rows: ReadonlyArray<SettlementRow>) =>
    sql<{ n: number | string }>`WITH ${commitMode}, ${settleCte(relayId, rows)} SELECT count(*)::int AS n FROM settled`

  // One statement, so one commit: data-modifying CTEs all run, on the same snapshot; the rows
  // being settled are 'processing' in it, so the claim cannot take them. The settle runs first
  // (see claimCtes).
  const settleAndClaim = (relayId: string, rows: ReadonlyArray<SettlementRow>, next: ClaimOptions) =>
    sql<ClaimRow>`WITH RECURSIVE ${commitMode}, ${settleCte(relayId, rows)}, ${claimCtes(next, true)} ${
      claimUpdate(next)
    }`

  const reclaimExpired = (maxCrashes: number) =>
    sql<{ suspect: number; failed: number }>`WITH expired AS (
        UPDATE ${outbox} SET
          status = CASE WHEN attempts - finished_attempts >= ${maxCrashes} THEN 'failed' ELSE 'suspect' END,
          last_error = CASE WHEN attempts - finished_attempts >= ${maxCrashes}
            THEN 'crash loop: ' || (attempts - finished_attempts) || ' publish attempts started and none finished'
            ELSE 'lease expired: the relay holding it stopped' END,
          claimed_by = NULL, claimed_until = NULL
        WHERE id IN (
          SELECT id FROM ${outbox} WHERE status = 'processing' AND claimed_until < now()
          LIMIT 10000 FOR UPDATE SKIP LOCKED
        )
        RETURNING status
      ) SELECT count(*) FILTER (WHERE status = 'suspect')::int AS suspect, count(*) FILTER (WHERE status = 'failed')::int AS failed FROM expired`

  // Per key, only a suspect that heads its key; unordered, the oldest suspect (unordered claims do
  // not wait behind earlier events of a key either).
  const claimSuspect = (relayId: string, lease: Duration.Duration, ordering: Ordering | undefined) => {
    const headsItsKey = ordering === "per-key"
      ? sql`AND NOT EXISTS (
          SELECT 1 FROM ${outbox} e WHERE e.ordering_key = s.ordering_key AND e.status IN ${unsettled}
            AND (e.tx_id, e.seq) < (s.tx_id, s.seq)
        )`
      : sql``
    return sql<ClaimRow>`WITH picked AS (
        SELECT s.id FROM ${outbox} s
        WHERE s.status = 'suspect' ${headsItsKey}
        ORDER BY s.seq LIMIT 1 FOR UPDATE SKIP LOCKED
      )
      UPDATE ${outbox} o SET status = 'processing', attempts = o.attempts + 1, claimed_by = ${relayId},
        claimed_until = now() + make_interval(secs => ${seconds(lease)})
      FROM picked WHERE o.id = picked.id
      RETURNING ${cols}`
  }

  const prune = (olderThan: Duration.Duration, limit: number) =>
    sql`DELETE FROM ${outbox} WHERE id IN (
        SELECT id FROM ${outbox}
        WHERE status = 'published' AND published_at < now() - make_interval(secs => ${seconds(olderThan)})
        ORDER BY published_at LIMIT ${limit}
      )
      RETURNING 1`

  const stats = sql<
    {
      pending: number
      processing: number
      published: number
      failed: number
      suspect: number
      oldest_ms: number | string | null
    }
  >`SELECT
      (SELECT count(*)::int FROM ${outbox} WHERE status = 'pending') AS pending,
      (SELECT count(*)::int FROM ${outbox} WHERE status = 'processing') AS processing,
      (SELECT count(*)::int FROM ${outbox} WHERE status = 'published') AS published,
      (SELECT count(*)::int FROM ${outbox} WHERE status = 'failed') AS failed,
      (SELECT count(*)::int FROM ${outbox} WHERE status = 'suspect') AS suspect,
      (SELECT (extract(epoch FROM now() - min(created_at)) * 1000)::float8 FROM ${outbox} WHERE status = 'pending') AS oldest_ms`

  const listFailed = (limit: number) =>
    sql<
      ClaimRow
    >`SELECT ${cols}, o.last_error FROM ${outbox} o WHERE status = 'failed' ORDER BY created_at LIMIT ${limit}`

  const retryFailed = (ids: ReadonlyArray<string> | undefined) => {
    const filter = ids === undefined
      ? sql`status = 'failed'`
      : sql`status = 'failed' AND id IN (SELECT jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)::uuid)`
    return sql<{ n: number | string }>`WITH retried AS (
        UPDATE ${outbox} SET status = 'pending', attempts = 0, finished_attempts = 0, available_at = now() WHERE ${filter} RETURNING 1
      ) SELECT count(*)::int AS n FROM retried`
  }

  const discardFailed = (ids: ReadonlyArray<string>) =>
    sql<{ n: number | string }>`WITH discarded AS (
        DELETE FROM ${outbox} WHERE status = 'failed' AND id IN (SELECT jsonb_array_elements_text(${
      JSON.stringify(ids)
    }::jsonb)::uuid)
        RETURNING 1
      ) SELECT count(*)::int AS n FROM discarded`

  return {
    outbox,
    claim,
    settle,
    settleAndClaim,
    reclaimExpired,
    claimSuspect,
    prune,
    stats,
    listFailed,
    retryFailed,
    discardFailed
  }
}

/** Claimed rows as claimed events. */
export const claimedEvents = (rows: ReadonlyArray<ClaimRow>, ordering?: Ordering): Array<ClaimedEvent> =>
  toClaimed(rows, ordering)

/** A failed row for the admin views. */
export const failedEvent = (row: ClaimRow) => ({
  message: toMessage(row),
  attempts: Number(row.attempts),
  lastError: row.last_error ?? null,
  createdAt: new Date(Number(row.created_at_ms))
})
