/**
 * The in-memory `SagaStore`, with the semantics of the Postgres one: compare-and-set on the
 * version, claims with leases, and transactions (writes are applied at commit, after checking that
 * no saga they touch was changed by someone else meanwhile). Time is Effect's `Clock`, so tests can
 * drive leases and deadlines with `TestClock`. Its transactions are its own: a memory
 * `OutboxStore` transaction around them commits after them. For tests and single-process demos.
 * @since 0.1.0
 * @module
 */
import { Clock, Context, Duration, Effect, Layer, Option } from "effect"
import { Contention, Rejected, StoreError } from "./Errors.ts"
import { pendingStep } from "./internal/sagaSteps.ts"
import { SagaConflict, SagaNotFound } from "./SagaErrors.ts"
import * as SagaStore from "./SagaStore.ts"

interface SagaRow {
  id: string
  type: string
  status: SagaStore.SagaStatus
  input: unknown
  currentStep: number
  version: number
  deadline: number | null
  error: string | null
  claimedBy: string | null
  claimedUntil: number | null
  createdAt: number
  updatedAt: number
}

interface StepRow {
  index: number
  name: string
  status: SagaStore.StepStatus
  result: unknown
  error: string | null
  attempts: number
  compensationAttempts: number
  startedAt: number | null
  finishedAt: number | null
}

interface Row {
  saga: SagaRow
  steps: Array<StepRow>
}

/** Rows written by an open transaction: applied at commit if nobody changed them meanwhile. */
interface Transaction {
  readonly writes: Map<string, { readonly baseVersion: number | undefined; readonly row: Row }>
}

let instances = 0

const clone = (row: Row): Row => ({ saga: { ...row.saga }, steps: row.steps.map((s) => ({ ...s })) })
// JSON values are stored as their JSON text would be read back (no shared references with callers).
const json = (value: unknown): unknown => value === undefined ? null : JSON.parse(JSON.stringify(value)) as unknown
const date = (ms: number | null) => ms === null ? null : new Date(ms)

const toSaga = (s: SagaRow): SagaStore.SagaRecord => ({
  id: s.id,
  type: s.type,
  status: s.status,
  input: json(s.input),
  currentStep: s.currentStep,
  version: s.version,
  deadline: date(s.deadline),
  error: s.error,
  claimedBy: s.claimedBy,
  claimedUntil: date(s.claimedUntil),
  createdAt: new Date(s.createdAt),
  updatedAt: new Date(s.updatedAt)
})

const toStep = (s: StepRow): SagaStore.StepRecord => ({
  index: s.index,
  name: s.name,
  status: s.status,
  result: json(s.result),
  error: s.error,
  attempts: s.attempts,
  compensationAttempts: s.compensationAttempts,
  startedAt: date(s.startedAt),
  finishedAt: date(s.finishedAt)
})

const applySteps = (row: Row, updates: ReadonlyArray<SagaStore.StepUpdate>, now: number) => {
  for (const u of updates) {
    const step = row.steps[u.index]
    if (step === undefined) continue
    if (u.status !== undefined) step.status = u.status
    if (u.result !== undefined) step.result = json(u.result)
    if (u.error !== undefined) step.error = u.error
    if (u.attemptStarted === true) {
      step.attempts++
      step.startedAt = now
    }
    if (u.resetCompensationAttempts === true) step.compensationAttempts = 0
    if (u.compensationStarted === true) step.compensationAttempts++
    if (u.finished === true) step.finishedAt = now
  }
}

const isActive = (s: SagaRow) => s.status === "running" || s.status === "compensating"

/**
 * Builds a fresh in-memory store (one per call). Each operation is synchronous, hence atomic, as a
 * statement would be.
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<SagaStore.Service> = Effect.sync(() => {
  // One key per store instance, so two memory stores never join each other's transactions.
  const Tx = Context.Service<Transaction>(`@tidings/core/MemorySagaStore/Transaction/${++instances}`)
  const rows = new Map<string, Row>()

  const current = Effect.serviceOption(Tx)

  /** The row as this transaction sees it (its own writes first). */
  const read = (tx: Option.Option<Transaction>, id: string): Row | undefined =>
    Option.isSome(tx) ? tx.value.writes.get(id)?.row ?? rows.get(id) : rows.get(id)

  /** A row to modify: a private copy inside a transaction, the stored row outside one. */
  const writable = (tx: Option.Option<Transaction>, id: string): Row | undefined => {
    if (Option.isNone(tx)) return rows.get(id)
    const own = tx.value.writes.get(id)
    if (own !== undefined) return own.row
    const stored = rows.get(id)
    if (stored === undefined) return undefined
    const copy = clone(stored)
    tx.value.writes.set(id, { baseVersion: stored.saga.version, row: copy })
    return copy
  }

  const commit = (tx: Transaction) =>
    Effect.suspend(() => {
      for (const [id, { baseVersion }] of tx.writes) {
        const stored = rows.get(id)
        const conflict = baseVersion === undefined ? stored !== undefined : stored?.saga.version !== baseVersion
        if (conflict) {
          return Effect.fail(
            new StoreError({
              operation: "commit",
              message: `saga ${id} was changed by another transaction (serialization failure)`,
              reason: new Contention(),
              cause: new SagaConflict({
                sagaId: id,
                expectedVersion: baseVersion ?? -1,
                ...(stored ? { actualVersion: stored.saga.version } : {})
              })
            })
          )
        }
      }
      for (const [id, { row }] of tx.writes) rows.set(id, row)
      return Effect.void
    })

  const service: SagaStore.Service = {
    withTransaction: (effect) =>
      Effect.flatMap(current, (open) => {
        if (Option.isSome(open)) return effect
        const tx: Transaction = { writes: new Map() }
        return Effect.provideService(effect, Tx, tx).pipe(Effect.tap(() => commit(tx)))
      }),

    create: (saga) =>
      Effect.gen(function*() {
        const tx = yield* current
        const now = yield* Clock.currentTimeMillis
        if (read(tx, saga.id) !== undefined) {
          return yield* new StoreError({
            operation: "create",
            message: `saga ${saga.id} already exists`,
            reason: new Rejected()
          })
        }
        const row: Row = {
          saga: {
            id: saga.id,
            type: saga.type,
            status: "running",
            input: json(saga.input),
            currentStep: 0,
            version: 0,
            deadline: saga.deadline === undefined ? null : now + Duration.toMillis(saga.deadline),
            error: null,
            claimedBy: saga.claim?.owner ?? null,
            claimedUntil: saga.claim === undefined ? null : now + Duration.toMillis(saga.claim.lease),
            createdAt: now,
            updatedAt: now
          },
          steps: saga.steps.map((name, index) => pendingStep(index, name))
        }
        applySteps(row, saga.stepUpdates ?? [], now)
        if (Option.isSome(tx)) tx.value.writes.set(saga.id, { baseVersion: undefined, row })
        else rows.set(saga.id, row)
        return toSaga(row.saga)
      }),

    load: (id) =>
      Effect.map(current, (tx) => {
        const row = read(tx, id)
        return row === undefined ? undefined : { saga: toSaga(row.saga), steps: row.steps.map(toStep) }
      }),

    update: (id, expectedVersion, update) =>
      Effect.gen(function*() {
        const tx = yield* current
        const now = yield* Clock.currentTimeMillis
        const seen = read(tx, id)
        if (seen === undefined) return yield* new SagaNotFound({ sagaId: id })
        if (seen.saga.version !== expectedVersion) {
          return yield* new SagaConflict({ sagaId: id, expectedVersion, actualVersion: seen.saga.version })
        }
        const row = writable(tx, id)!
        const s = row.saga
        if (update.status !== undefined) s.status = update.status
        if (update.currentStep !== undefined) s.currentStep = update.currentStep
        if (update.deadline !== undefined) {
          s.deadline = update.deadline === null
            ? null
            : now + Duration.toMillis(update.deadline)
        }
        if (update.error !== undefined) s.error = update.error
        if (update.claim !== undefined) {
          s.claimedBy = update.claim?.owner ?? null
          s.claimedUntil = update.claim === null ? null : now + Duration.toMillis(update.claim.lease)
        }
        applySteps(row, update.steps ?? [], now)
        s.version++
        s.updatedAt = now
        return toSaga(s)
      }),

    claim: (id, expectedVersion, claim) =>
      Effect.gen(function*() {
        const tx = yield* current
        const now = yield* Clock.currentTimeMillis
        const seen = read(tx, id)
        if (seen === undefined || seen.saga.version !== expectedVersion || !isActive(seen.saga)) return undefined
        if (seen.saga.claimedUntil !== null && seen.saga.claimedUntil >= now) return undefined
        const s = writable(tx, id)!.saga
        s.claimedBy = claim.owner
        s.claimedUntil = now + Duration.toMillis(claim.lease)
        s.version++
        s.updatedAt = now
        return toSaga(s)
      }),

    heartbeat: (id, claim) =>
      Effect.gen(function*() {
        const tx = yield* current
        const now = yield* Clock.currentTimeMillis
        const seen = read(tx, id)
        if (seen === undefined || seen.saga.claimedBy !== claim.owner || !isActive(seen.saga)) return false
        writable(tx, id)!.saga.claimedUntil = now + Duration.toMillis(claim.lease)
        return true
      }),

    findRecoverable: ({ limit, stuckAfter, types }) =>
      Effect.gen(function*() {
        const tx = yield* current
        const now = yield* Clock.currentTimeMillis
        const due: Array<{ readonly at: number; readonly saga: SagaRow }> = []
        const ids = new Set([...rows.keys(), ...(Option.isSome(tx) ? tx.value.writes.keys() : [])])
        for (const id of ids) {
          const s = read(tx, id)!.saga
          if (!isActive(s) || (types !== undefined && !types.includes(s.type))) continue
          const at = s.claimedUntil !== null
            ? s.claimedUntil
            : s.deadline !== null
            ? s.deadline
            : s.updatedAt + Duration.toMillis(stuckAfter)
          if (at < now) due.push({ at, saga: s })
        }
        due.sort((a, b) => a.at - b.at)
        return due.slice(0, limit).map((d) => toSaga(d.saga))
      }),

    list: ({ limit, status, type }) =>
      Effect.gen(function*() {
        const tx = yield* current
        const ids = new Set([...rows.keys(), ...(Option.isSome(tx) ? tx.value.writes.keys() : [])])
        const out: Array<SagaRow> = []
        for (const id of ids) {
          const s = read(tx, id)?.saga
          if (
            s !== undefined && (status === undefined || s.status === status) && (type === undefined || s.type === type)
          ) out.push(s)
        }
        out.sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1))
        return out.slice(0, Math.max(0, limit)).map(toSaga)
      }),

    countByStatus: Effect.gen(function*() {
      const tx = yield* current
      const counts = { running: 0, completed: 0, compensating: 0, compensated: 0, failed: 0 }
      const ids = new Set([...rows.keys(), ...(Option.isSome(tx) ? tx.value.writes.keys() : [])])
      for (const id of ids) {
        const row = read(tx, id)
        if (row !== undefined) counts[row.saga.status]++
      }
      return counts
    })
  }
  return service
})

/**
 * A fresh in-memory store as a layer.
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<SagaStore.SagaStore> = Layer.effect(SagaStore.SagaStore, make)
