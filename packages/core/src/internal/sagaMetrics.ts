/**
 * Recording the saga metrics (defined in `Metrics.saga`) with their attributes.
 */
import { Effect, Metric } from "effect"
import * as Metrics from "../Metrics.ts"
import type { SagaStatus } from "../SagaStore.ts"

/**
 * A saga started (`Saga.run`, `Saga.start`).
 * @since 0.1.0
 * @category metrics
 */
export const started: Effect.Effect<void> = Effect.suspend(() => Metric.update(Metrics.saga.started, 1))

/**
 * A saga reached a final status.
 * @since 0.1.0
 * @category metrics
 */
export const finished = (status: SagaStatus): Effect.Effect<void> =>
  Metric.update(Metric.withAttributes(Metrics.saga.finished, { status }), 1)

/**
 * A step's compensation ended: compensated, or failed for good.
 * @since 0.1.0
 * @category metrics
 */
export const compensated = (outcome: "compensated" | "failed"): Effect.Effect<void> =>
  Metric.update(Metric.withAttributes(Metrics.saga.compensations, { outcome }), 1)

/**
 * How long a step took (an action run, or a command until its reply), in milliseconds.
 * @since 0.1.0
 * @category metrics
 */
export const stepTook = (saga: string, step: string, ms: number): Effect.Effect<void> =>
  Metric.update(Metric.withAttributes(Metrics.saga.stepDuration, { saga, step }), Math.max(0, ms) / 1000)

/**
 * A recovery worker claimed a saga and resumes it.
 * @since 0.1.0
 * @category metrics
 */
export const recovered: Effect.Effect<void> = Effect.suspend(() => Metric.update(Metrics.saga.recoveries, 1))

/**
 * The sagas-by-status gauge, from the store's counts.
 * @since 0.1.0
 * @category metrics
 */
export const byStatus = (counts: Record<SagaStatus, number>): Effect.Effect<void> =>
  Effect.forEach(
    Object.entries(counts),
    ([status, n]) => Metric.update(Metric.withAttributes(Metrics.saga.byStatus, { status }), n),
    { discard: true }
  )
