/**
 * The saga store on Postgres, written against effect/sql's `SqlClient`: it joins the app's
 * `sql.withTransaction`, so that `Saga.start` commits the saga with the business change and the
 * first command, and each reply's state change commits with the next command. Every write is one
 * statement; compare-and-set is `WHERE version = $expected`, so a concurrent writer either waits for
 * the row lock and then finds the version changed, or loses outright.
 * @since 0.1.0
 * @module
 */
import type { InvalidConfig } from "@tidings/core/Errors"
import {
  type Execution,
  type NewSaga,
  SagaConflict,
  SagaNotFound,
  type SagaRecord,
  type SagaStatus,
  SagaStore,
  type SagaUpdate,
  type Service,
  type StepRecord,
  type StepUpdate
} from "@tidings/core/SagaStore"
import * as Settings from "@tidings/core/Settings"
import { Duration, Effect, Layer } from "effect"
import { SqlClient, SqlError } from "effect/sql"
import * as Environment from "./internal/environment.ts"
import { resolveSchema } from "./internal/identifier.ts"
import { fromSqlError, mapSqlError } from "./internal/storeError.ts"

/**
 * Options of the Postgres saga store.
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Schema holding the tables (see `Migrator`); default `tidings`. */
  readonly schema?: string
}

interface SagaDoc {
  readonly id: string
  readonly type: string
  readonly status: SagaRecord["status"]
  readonly input: unknown
  readonly current_step: number
  readonly version: number
  readonly deadline: number | null
  readonly error: string | null
  readonly claimed_by: string | null
  readonly claimed_until: number | null
  readonly created_at: number
  readonly updated_at: number
}

interface StepDoc {
  readonly index: number
  readonly name: string
  readonly status: StepRecord["status"]
  readonly result: unknown
  readonly error: string | null
  readonly attempts: number
  readonly compensation_attempts: number
  readonly started_at: number | null
  readonly finished_at: number | null
}

const date = (ms: number | null) => ms === null ? null : new Date(ms)

const toSaga = (doc: string): SagaRecord => {
  const d = JSON.parse(doc) as SagaDoc
  return {
    id: d.id,
    type: d.type,
    status: d.status,
    input: d.input,
    currentStep: d.current_step,
    version: d.version,
    deadline: date(d.deadline),
    error: d.error,
    claimedBy: d.claimed_by,
    claimedUntil: date(d.claimed_until),
    createdAt: new Date(d.created_at),
    updatedAt: new Date(d.updated_at)
  }
}

const toSteps = (doc: string): Array<StepRecord> =>
  (JSON.parse(doc) as Array<StepDoc>).map((d) => ({
    index: d.index,
    name: d.name,
    status: d.status,
    result: d.result ?? null,
    error: d.error,
    attempts: d.attempts,
    compensationAttempts: d.compensation_attempts,
    startedAt: date(d.started_at),
    finishedAt: date(d.finished_at)
  }))

const ms = (column: string) => `(extract(epoch FROM ${column}) * 1000)::float8`

// Rows are read as one JSON document each, so that values come back the same on any driver.
const sagaDoc = (t: string) =>
  `json_build_object('id', ${t}.id, 'type', ${t}.type, 'status', ${t}.status, 'input', ${t}.input,
    'current_step', ${t}.current_step, 'version', ${t}.version, 'deadline', ${ms(`${t}.deadline`)}, 'error', ${t}.error,
    'claimed_by', ${t}.claimed_by, 'claimed_until', ${ms(`${t}.claimed_until`)},
    'created_at', ${ms(`${t}.created_at`)}, 'updated_at', ${ms(`${t}.updated_at`)})::text`

const stepDoc = (t: string) =>
  `json_build_object('index', ${t}.index, 'name', ${t}.name, 'status', ${t}.status, 'result', ${t}.result, 'error', ${t}.error,
    'attempts', ${t}.attempts, 'compensation_attempts', ${t}.compensation_attempts,
    'started_at', ${ms(`${t}.started_at`)}, 'finished_at', ${ms(`${t}.finished_at`)})`

const seconds = (d: Duration.Duration) => Duration.toMillis(d) / 1000

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** Step updates as rows; several updates of one step are merged (their counters added). */
const stepRows = (updates: ReadonlyArray<StepUpdate>) => {
  const rows = new Map<number, {
    index: number
    status?: string
    set_result: boolean
    result: unknown
    set_error: boolean
    error: string | null
    attempts_inc: number
    comp_inc: number
    comp_reset: boolean
    finished: boolean
  }>()
  for (const u of updates) {
    const row = rows.get(u.index) ??
      {
        index: u.index,
        set_result: false,
        result: null,
        set_error: false,
        error: null,
        attempts_inc: 0,
        comp_inc: 0,
        comp_reset: false,
        finished: false
      }
    if (u.status !== undefined) row.status = u.status
    if (u.result !== undefined) Object.assign(row, { set_result: true, result: u.result ?? null })
    if (u.error !== undefined) Object.assign(row, { set_error: true, error: u.error })
    if (u.attemptStarted === true) row.attempts_inc++
    if (u.resetCompensationAttempts === true) Object.assign(row, { comp_reset: true, comp_inc: 0 })
    if (u.compensationStarted === true) row.comp_inc++
    if (u.finished === true) row.finished = true
    rows.set(u.index, row)
  }
  return [...rows.values()]
}

/**
 * Builds the store; fails with `InvalidConfig` for a bad schema name.
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<Service, InvalidConfig, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const schema = yield* resolveSchema(options.schema)
    const sql = yield* SqlClient.SqlClient
    const saga = sql(`${schema}.saga`)
    const sagaStep = sql(`${schema}.saga_step`)
    const active = sql.literal("('running', 'compensating')")
    const docOf = (t: string) => sql.literal(sagaDoc(t))

    const store: Service = {
      // SqlErrors of the transaction (BEGIN/COMMIT, or the caller's own queries) become StoreErrors.
      withTransaction: (effect) =>
        sql.withTransaction(effect).pipe(
          Effect.catchIf(SqlError.isSqlError, (e) => Effect.fail(fromSqlError("transaction", e)))
        ),

      create: (input: NewSaga) => {
        // The steps' first values: defaults with the initial updates applied.
        const steps = input.steps.map((name, index) => ({
          index,
          name,
          status: "pending",
          result: null,
          error: null,
          attempts: 0,
          compensation_attempts: 0,
          started: false,
          finished: false
        }))
        for (const r of stepRows(input.stepUpdates ?? [])) {
          const s = steps[r.index]
          if (s === undefined) continue
          if (r.status !== undefined) s.status = r.status
          if (r.set_result) s.result = r.result as null
          if (r.set_error) s.error = r.error as null
          s.attempts += r.attempts_inc
          s.compensation_attempts += r.comp_inc
          s.started ||= r.attempts_inc > 0
          s.finished ||= r.finished
        }
        const params = JSON.stringify({
          id: input.id,
          type: input.type,
          ...(input.deadline === undefined ? {} : { deadline: seconds(input.deadline) }),
          ...(input.claim === undefined ? {} : { owner: input.claim.owner, lease: seconds(input.claim.lease) }),
          steps
        })
        return sql<{ doc: string }>`WITH p AS (SELECT ${params}::json AS j),
          s AS (
            INSERT INTO ${saga} (id, type, status, input, deadline, claimed_by, claimed_until)
            SELECT (p.j->>'id')::uuid, p.j->>'type', 'running', ${JSON.stringify(input.input ?? null)}::json,
              now() + make_interval(secs => (p.j->>'deadline')::float8),
              p.j->>'owner', now() + make_interval(secs => (p.j->>'lease')::float8)
            FROM p
            RETURNING *
          ),
          st AS (
            INSERT INTO ${sagaStep} (saga_id, index, name, status, result, error, attempts, compensation_attempts, started_at, finished_at)
            SELECT s.id, x.index, x.name, x.status, x.result, x.error, x.attempts, x.compensation_attempts,
              CASE WHEN x.started THEN now() END, CASE WHEN x.finished THEN now() END
            FROM s, p, json_to_recordset(p.j->'steps') AS x(index integer, name text, status text, result json, error text,
              attempts integer, compensation_attempts integer, started boolean, finished boolean)
            RETURNING 1
          )
          SELECT ${docOf("s")} AS doc FROM s`.pipe(
          Effect.map((rows) => toSaga(rows[0]!.doc)),
          mapSqlError("create")
        )
      },

      load: (id) =>
        !uuid.test(id) ? Effect.succeed(undefined) : sql<{ doc: string; steps: string }>`SELECT ${docOf("g")} AS doc,
            (SELECT coalesce(json_agg(${sql.literal(stepDoc("t"))} ORDER BY t.index), '[]'::json)::text
              FROM ${sagaStep} t WHERE t.saga_id = g.id) AS steps
          FROM ${saga} g WHERE g.id = ${id}`.pipe(
          Effect.map(([row]): Execution | undefined =>
            row === undefined ? undefined : { saga: toSaga(row.doc), steps: toSteps(row.steps) }
          ),
          mapSqlError("load")
        ),

      update: (id, expectedVersion, update: SagaUpdate) => {
        if (!uuid.test(id)) return Effect.fail(new SagaNotFound({ sagaId: id }))
        const params = JSON.stringify({
          ...(update.status === undefined ? {} : { status: update.status }),
          ...(update.currentStep === undefined ? {} : { current_step: update.currentStep }),
          ...(update.deadline === undefined
            ? {}
            : { deadline: update.deadline === null ? null : seconds(update.deadline) }),
          ...(update.error === undefined ? {} : { error: update.error }),
          ...(update.claim === undefined
            ? {}
            : {
              claim: update.claim === null ? null : { owner: update.claim.owner, lease: seconds(update.claim.lease) }
            }),
          steps: stepRows(update.steps ?? [])
        })
        return sql<{ doc: string | null; current: number | null }>`WITH p AS (SELECT ${params}::json AS j),
          s AS (
            UPDATE ${saga} AS g SET
              status = coalesce(p.j->>'status', g.status),
              current_step = coalesce((p.j->>'current_step')::integer, g.current_step),
              deadline = CASE WHEN p.j->'deadline' IS NULL THEN g.deadline
                WHEN json_typeof(p.j->'deadline') = 'null' THEN NULL
                ELSE now() + make_interval(secs => (p.j->>'deadline')::float8) END,
              error = CASE WHEN p.j->'error' IS NULL THEN g.error ELSE p.j->>'error' END,
              claimed_by = CASE WHEN p.j->'claim' IS NULL THEN g.claimed_by ELSE p.j->'claim'->>'owner' END,
              claimed_until = CASE WHEN p.j->'claim' IS NULL THEN g.claimed_until
                WHEN json_typeof(p.j->'claim') = 'null' THEN NULL
                ELSE now() + make_interval(secs => (p.j->'claim'->>'lease')::float8) END,
              version = g.version + 1,
              updated_at = now()
            FROM p
            WHERE g.id = ${id} AND g.version = ${expectedVersion}
            RETURNING g.*
          ),
          st AS (
            UPDATE ${sagaStep} AS t SET
              status = coalesce(x.status, t.status),
              result = CASE WHEN x.set_result THEN x.result ELSE t.result END,
              error = CASE WHEN x.set_error THEN x.error ELSE t.error END,
              attempts = t.attempts + x.attempts_inc,
              compensation_attempts = CASE WHEN x.comp_reset THEN 0 ELSE t.compensation_attempts END + x.comp_inc,
              started_at = CASE WHEN x.attempts_inc > 0 THEN now() ELSE t.started_at END,
              finished_at = CASE WHEN x.finished THEN now() ELSE t.finished_at END
            FROM s, p, json_to_recordset(p.j->'steps') AS x(index integer, status text, set_result boolean, result json,
              set_error boolean, error text, attempts_inc integer, comp_inc integer, comp_reset boolean, finished boolean)
            WHERE t.saga_id = s.id AND t.index = x.index
            RETURNING 1
          )
          SELECT (SELECT ${docOf("s")} FROM s) AS doc, (SELECT version FROM ${saga} WHERE id = ${id}) AS current`.pipe(
          mapSqlError("update"),
          Effect.flatMap(([row]): Effect.Effect<SagaRecord, SagaConflict | SagaNotFound> => {
            if (row?.doc !== null && row?.doc !== undefined) return Effect.succeed(toSaga(row.doc))
            if (row?.current === null || row?.current === undefined) {
              return Effect.fail(new SagaNotFound({ sagaId: id }))
            }
            return Effect.fail(new SagaConflict({ sagaId: id, expectedVersion, actualVersion: Number(row.current) }))
          })
        )
      },

      claim: (id, expectedVersion, claim) =>
        !uuid.test(id) ? Effect.succeed(undefined) : sql<{ doc: string }>`WITH s AS (
            UPDATE ${saga} AS g SET claimed_by = ${claim.owner},
              claimed_until = now() + make_interval(secs => ${seconds(claim.lease)}),
              version = g.version + 1, updated_at = now()
            WHERE g.id = ${id} AND g.version = ${expectedVersion} AND g.status IN ${active}
              AND (g.claimed_until IS NULL OR g.claimed_until < now())
            RETURNING g.*
          ) SELECT ${docOf("s")} AS doc FROM s`.pipe(
          Effect.map(([row]) => row === undefined ? undefined : toSaga(row.doc)),
          mapSqlError("claim")
        ),

      heartbeat: (id, claim) =>
        !uuid.test(id) ? Effect.succeed(false) : sql<{ id: string }>`UPDATE ${saga}
            SET claimed_until = now() + make_interval(secs => ${seconds(claim.lease)})
            WHERE id = ${id} AND claimed_by = ${claim.owner} AND status IN ${active}
            RETURNING id`.pipe(Effect.map((rows) => rows.length > 0), mapSqlError("heartbeat")),

      findRecoverable: ({ limit, stuckAfter, types }) =>
        sql<{ doc: string }>`SELECT ${docOf("g")} AS doc FROM ${saga} g
          WHERE g.status IN ${active}
            ${
          types === undefined
            ? sql``
            : sql`AND g.type IN (SELECT json_array_elements_text(${JSON.stringify(types)}::json))`
        }
            AND (
            (g.claimed_until IS NOT NULL AND g.claimed_until < now())
            OR (g.claimed_until IS NULL AND g.deadline IS NOT NULL AND g.deadline < now())
            OR (g.claimed_until IS NULL AND g.deadline IS NULL AND g.updated_at < now() - make_interval(secs => ${
          seconds(stuckAfter)
        }))
          )
          ORDER BY coalesce(g.claimed_until, g.deadline, g.updated_at + make_interval(secs => ${seconds(stuckAfter)}))
          LIMIT ${limit}`.pipe(Effect.map((rows) => rows.map((r) => toSaga(r.doc))), mapSqlError("findRecoverable")),

      list: ({ limit, status, type }) =>
        sql<{ doc: string }>`SELECT ${docOf("g")} AS doc FROM ${saga} g
          WHERE ${status === undefined ? sql`TRUE` : sql`g.status = ${status}`} AND ${
          type === undefined ? sql`TRUE` : sql`g.type = ${type}`
        }
          ORDER BY g.created_at DESC, g.id DESC LIMIT ${Math.max(0, Math.floor(limit))}`.pipe(
          Effect.map((rows) => rows.map((r) => toSaga(r.doc))),
          mapSqlError("list")
        ),

      countByStatus: sql<
        { status: SagaStatus; n: number | string }
      >`SELECT status, count(*)::int AS n FROM ${saga} GROUP BY status`.pipe(
        Effect.map((rows) => {
          const counts: Record<SagaStatus, number> = {
            running: 0,
            completed: 0,
            compensating: 0,
            compensated: 0,
            failed: 0
          }
          for (const r of rows) counts[r.status] = Number(r.n)
          return counts
        }),
        mapSqlError("countByStatus")
      )
    }
    return store
  })

/**
 * The Postgres saga store as a layer over the app's `SqlClient`.
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<SagaStore, InvalidConfig, SqlClient.SqlClient> =>
  Layer.effect(SagaStore, make(options))

/**
 * The options as a schema (what {@link layerConfig} reads from the environment).
 * @since 0.1.0
 * @category settings
 */
export const ConfigSchema = Environment.SagaSchema

/**
 * The store's environment variables (`TIDINGS_SCHEMA`, shared by every store, and its own).
 * @since 0.1.0
 * @category settings
 */
export const environment: Settings.Environment<typeof ConfigSchema> = Environment.saga

/**
 * {@link layer} with its options from the environment, on top of `options.defaults`; a wrong
 * variable fails with one `InvalidConfig` naming every wrong variable.
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Settings.EnvironmentOptions<Options> = {}
): Layer.Layer<SagaStore, InvalidConfig, SqlClient.SqlClient> =>
  Layer.unwrap(Effect.map(Settings.read(environment, options), layer))
