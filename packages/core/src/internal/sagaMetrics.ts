import { Metric } from "effect"

/** Sagas started (`Saga.run` and `Saga.start`). */
export const started = Metric.counter("tidings_saga_started_total", { description: "Sagas started", incremental: true })

/** Sagas that reached a final status, by `status` (completed, compensated, failed). */
export const finished = Metric.counter("tidings_saga_finished_total", { description: "Sagas finished, by final status", incremental: true })

/** Step durations (an action, or a command until its reply), by `saga` and `step`. */
export const stepDuration = Metric.histogram("tidings_saga_step_duration_seconds", {
  description: "Saga step duration: action run, or command sent until its reply",
  boundaries: Metric.exponentialBoundaries({ start: 0.001, factor: 2, count: 20 })
})

/** Compensations that ran to an outcome, by `outcome` (compensated, failed). */
export const compensations = Metric.counter("tidings_saga_compensations_total", {
  description: "Saga step compensations, by outcome",
  incremental: true
})

/** Sagas taken over by a recovery worker (past their deadline, stuck, or their executor died). */
export const recoveries = Metric.counter("tidings_saga_recoveries_total", {
  description: "Sagas claimed and resumed by a recovery worker",
  incremental: true
})

/** Sagas currently in each status (`status` attribute), refreshed by the recovery worker. */
export const byStatus = Metric.gauge("tidings_saga_sagas", { description: "Sagas by status" })
