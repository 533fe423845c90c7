import type * as LogStore from "@tidings/core/LogStore"
import { fromStoredJson } from "@tidings/core/Message"
import { Duration } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import type { OutboxRow } from "./outboxRow.ts"

/** The log tables of a schema, as identifiers. */
export interface Tables {
  readonly log: Statement.Identifier
  readonly cursor: Statement.Identifier
  readonly member: Statement.Identifier
  readonly outbox: Statement.Identifier
}

/** A cursor row as the statements return it. */
export interface StateRow {
  readonly partition: number
  readonly epoch: number | string
  readonly tx_id: string
  readonly seq: number | string
  readonly crashes: number
  readonly suspect_tx: string | null
  readonly suspect_seq: number | string | null
  readonly head_attempts: number
  readonly retry_ms: number | string
  readonly last_error: string | null
}

/** An event row as reads return it. */
export interface EventRow extends OutboxRow {
  readonly partition: number
  /** NULL on the rows that report a partition instead of an event: then `seq` is 0 (lost) or 1 (held back). */
  readonly tx_id: string | null
  readonly seq: number | string
}

export const seconds = (d: Duration.Duration) => Duration.toMillis(d) / 1000

/** The columns returned for a cursor row (`c`). */
export const stateColumns =
  `c.partition, c.epoch, c.tx_id::text AS tx_id, c.seq, c.crashes, c.suspect_tx::text AS suspect_tx, c.suspect_seq,
  c.head_attempts, coalesce(greatest(0, extract(epoch FROM c.retry_at - now()) * 1000), 0)::float8 AS retry_ms, c.last_error`

export const toState = (r: StateRow): LogStore.PartitionState => ({
  partition: Number(r.partition),
  epoch: Number(r.epoch),
  cursor: { tx: r.tx_id, seq: Number(r.seq) },
  crashes: Number(r.crashes),
  suspectUntil: r.suspect_tx === null ? null : { tx: r.suspect_tx, seq: Number(r.suspect_seq) },
  headAttempts: Number(r.head_attempts),
  retryInMs: Number(r.retry_ms),
  lastError: r.last_error
})

const noHeaders: Readonly<Record<string, string>> = Object.freeze({})

export const toEvent = (r: EventRow): LogStore.LogEvent => ({
  partition: Number(r.partition),
  position: { tx: r.tx_id!, seq: Number(r.seq) },
  // Payloads stay JSON text until read (`fromStoredJson`); events appended without headers share one
  // empty object (a relay replaces, never mutates, a message's headers).
  message: fromStoredJson({
    id: r.id,
    type: r.event_type,
    version: Number(r.event_version),
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    orderingKey: r.ordering_key,
    headers: r.headers === "{}" ? noHeaders : JSON.parse(r.headers) as Record<string, string>,
    occurredAt: new Date(Number(r.occurred_at_ms))
  }, r.payload)
})

/** `{1,2,3}`: an int array literal passed as one text parameter (no driver-specific array binding). */
export const intArray = (xs: ReadonlyArray<number>) => `{${xs.map((x) => Math.trunc(x)).join(",")}}`

/**
 * Takes leases that are free, expired or already the member's, bumping their epochs. Taking one over
 * from another owner whose batch is still marked in flight counts a crash against the head, and the
 * batch becomes suspect (its events are handled one at a time).
 */
export const acquire = (
  sql: SqlClient.SqlClient,
  t: Tables,
  group: string,
  member: string,
  partitions: ReadonlyArray<number>,
  lease: Duration.Duration
) => {
  return sql<StateRow>`WITH picked AS (
      SELECT c.partition, (c.inflight_tx IS NOT NULL AND c.owner IS NOT NULL AND c.owner <> ${member}) AS crashed,
        (c.suspect_tx IS NULL OR (c.inflight_tx, c.inflight_seq) > (c.suspect_tx, c.suspect_seq)) AS further
      FROM ${t.cursor} c
      WHERE c.group_name = ${group} AND c.partition = ANY(${intArray(partitions)}::int[])
        AND (c.owner IS NULL OR c.owner = ${member} OR c.lease_until < now())
      FOR UPDATE SKIP LOCKED
    )
    UPDATE ${t.cursor} c SET
      crashes = c.crashes + CASE WHEN p.crashed THEN 1 ELSE 0 END,
      suspect_tx = CASE WHEN p.crashed AND p.further THEN c.inflight_tx ELSE c.suspect_tx END,
      suspect_seq = CASE WHEN p.crashed AND p.further THEN c.inflight_seq ELSE c.suspect_seq END,
      inflight_tx = NULL, inflight_seq = NULL,
      owner = ${member}, epoch = c.epoch + 1, lease_until = now() + make_interval(secs => ${
    seconds(lease)
  }), updated_at = now()
    FROM picked p
    WHERE c.group_name = ${group} AND c.partition = p.partition
    RETURNING ${sql.literal(stateColumns)}`
}

/**
 * Reads each owned partition's readable events after its position (transactions older than every
 * running one), marks each batch's end as in flight, and reports lost and held-back partitions.
 */
export const read = (
  sql: SqlClient.SqlClient,
  t: Tables,
  commitMode: ReturnType<SqlClient.SqlClient["literal"]>,
  group: string,
  member: string,
  requests: ReadonlyArray<LogStore.ReadRequest>
) => {
  const req = JSON.stringify(
    requests.map((r) => ({
      partition: r.partition,
      epoch: r.epoch,
      tx: r.after.tx,
      seq: r.after.seq,
      lim: Math.max(1, Math.trunc(r.limit))
    }))
  )
  return sql<EventRow>`WITH ${commitMode},
    req AS MATERIALIZED (SELECT * FROM json_to_recordset(${req}::json) AS r(partition int, epoch bigint, tx text, seq bigint, lim int)),
    horizon AS MATERIALIZED (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin),
    owned AS MATERIALIZED (
      SELECT r.* FROM req r JOIN ${t.cursor} c ON c.group_name = ${group} AND c.partition = r.partition AND c.owner = ${member} AND c.epoch = r.epoch
    ),
    rows AS MATERIALIZED (
      SELECT e.* FROM owned r CROSS JOIN LATERAL (
        SELECT l.partition, l.tx_id, l.seq, l.id, l.event_type, l.event_version, l.aggregate_type, l.aggregate_id, l.ordering_key,
          l.payload, l.headers, l.occurred_at, l.only_groups
        FROM ${t.log} l
        WHERE l.partition = r.partition AND (l.tx_id, l.seq) > (r.tx::xid8, r.seq) AND l.tx_id < (SELECT xmin FROM horizon)
        ORDER BY l.tx_id, l.seq LIMIT r.lim
      ) e
    ),
    last_tx AS (SELECT partition, max(tx_id) AS tx_id FROM rows GROUP BY partition),
    ends AS (SELECT r.partition, r.tx_id, max(r.seq) AS seq FROM rows r JOIN last_tx t ON t.partition = r.partition AND t.tx_id = r.tx_id GROUP BY 1, 2),
    marked AS (
      UPDATE ${t.cursor} c SET inflight_tx = e.tx_id, inflight_seq = e.seq
      FROM ends e, owned o, commit_mode
      WHERE c.group_name = ${group} AND c.partition = e.partition AND o.partition = e.partition AND c.owner = ${member} AND c.epoch = o.epoch
      RETURNING 1
    )
    SELECT rows.partition, rows.tx_id::text AS tx_id, rows.seq, rows.id, rows.event_type, rows.event_version, rows.aggregate_type,
      rows.aggregate_id, rows.ordering_key, rows.payload::text AS payload, rows.headers::text AS headers,
      date_part('epoch', rows.occurred_at) * 1000 AS occurred_at_ms
    FROM rows WHERE (rows.only_groups IS NULL OR ${group} = ANY(rows.only_groups))
    UNION ALL
    SELECT r.partition, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM req r WHERE NOT EXISTS (SELECT 1 FROM owned o WHERE o.partition = r.partition)
    UNION ALL
    SELECT o.partition, NULL, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM owned o WHERE EXISTS (
      SELECT 1 FROM ${t.log} l WHERE l.partition = o.partition AND l.tx_id >= (SELECT xmin FROM horizon)
    )`
}

/** The settle statement: fenced cursor moves, head bookkeeping, and failed events copied to the outbox. */
export const settle = (
  sql: SqlClient.SqlClient,
  t: Tables,
  commitMode: ReturnType<SqlClient.SqlClient["literal"]> | undefined,
  group: string,
  member: string,
  settlements: ReadonlyArray<LogStore.Settlement>
) => {
  const rows = JSON.stringify(settlements.map((s) => ({
    partition: s.partition,
    epoch: s.epoch,
    tx: s.cursor?.tx ?? null,
    seq: s.cursor?.seq ?? null,
    attempts: s.retry?.attempts ?? null,
    delay_ms: s.retry === undefined ? null : Duration.toMillis(s.retry.delay),
    error: s.retry?.error ?? null
  })))
  const failed = JSON.stringify(
    settlements.flatMap((s) =>
      (s.failed ?? []).map((f) => ({
        partition: s.partition,
        tx: f.event.position.tx,
        seq: f.event.position.seq,
        attempts: f.attempts,
        error: f.error
      }))
    )
  )
  const mode = commitMode === undefined ? sql`` : sql`${commitMode},`
  // Only when there are failed events: joined with nothing, the planner may still scan the log.
  const failedCte = failed === "[]" ? sql`` : sql`,
    failed AS (
      INSERT INTO ${t.outbox} (id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, headers, occurred_at,
        status, attempts, finished_attempts, last_error, log_groups)
      SELECT l.id, l.aggregate_type, l.aggregate_id, l.ordering_key, l.event_type, l.event_version, l.payload, l.headers, l.occurred_at,
        'failed', f.attempts, f.attempts, f.error, ARRAY[${group}]::text[]
      FROM json_to_recordset(${failed}::json) AS f(partition int, tx text, seq bigint, attempts int, error text)
      JOIN ${t.log} l ON l.partition = f.partition AND l.tx_id = f.tx::xid8 AND l.seq = f.seq
      WHERE f.partition IN (SELECT partition FROM settled)
      ON CONFLICT (id) DO UPDATE SET status = 'failed', attempts = excluded.attempts, finished_attempts = excluded.finished_attempts,
        last_error = excluded.last_error, claimed_by = NULL, claimed_until = NULL,
        log_groups = ARRAY(SELECT DISTINCT g FROM unnest(coalesce(${t.outbox}.log_groups, '{}'::text[]) || excluded.log_groups) AS g)
      RETURNING 1
    )`
  const modeJoin = commitMode === undefined ? sql`` : sql`, commit_mode`
  return sql<StateRow>`WITH ${mode}
    s AS MATERIALIZED (
      SELECT s.*, (s.tx IS NOT NULL) AS has_cursor FROM json_to_recordset(${rows}::json)
        AS s(partition int, epoch bigint, tx text, seq bigint, attempts int, delay_ms float8, error text)
    ),
    moves AS MATERIALIZED (
      SELECT s.*, (s.has_cursor AND (s.tx::xid8, s.seq) > (c.tx_id, c.seq)) AS moved,
        (c.suspect_tx IS NOT NULL AND s.has_cursor AND (s.tx::xid8, s.seq) < (c.suspect_tx, c.suspect_seq)) AS in_suspect
      FROM s JOIN ${t.cursor} c ON c.group_name = ${group} AND c.partition = s.partition
    ),
    settled AS (
      UPDATE ${t.cursor} c SET
        tx_id = CASE WHEN m.moved THEN m.tx::xid8 ELSE c.tx_id END,
        seq = CASE WHEN m.moved THEN m.seq ELSE c.seq END,
        inflight_tx = NULL, inflight_seq = NULL,
        head_attempts = CASE WHEN m.attempts IS NOT NULL THEN m.attempts WHEN m.moved THEN 0 ELSE c.head_attempts END,
        retry_at = CASE WHEN m.attempts IS NOT NULL THEN now() + make_interval(secs => m.delay_ms / 1000.0) WHEN m.moved THEN NULL ELSE c.retry_at END,
        last_error = CASE WHEN m.attempts IS NOT NULL THEN m.error WHEN m.moved THEN NULL ELSE c.last_error END,
        crashes = CASE WHEN m.moved THEN (CASE WHEN m.in_suspect THEN 1 ELSE 0 END) ELSE c.crashes END,
        suspect_tx = CASE WHEN m.moved AND NOT m.in_suspect THEN NULL ELSE c.suspect_tx END,
        suspect_seq = CASE WHEN m.moved AND NOT m.in_suspect THEN NULL ELSE c.suspect_seq END,
        updated_at = now()
      FROM moves m ${modeJoin}
      WHERE c.group_name = ${group} AND c.partition = m.partition AND c.owner = ${member} AND c.epoch = m.epoch
      RETURNING ${sql.literal(stateColumns)}
    )${failedCte}
    SELECT c.* FROM settled c`
}
