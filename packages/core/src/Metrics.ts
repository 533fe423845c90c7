/**
 * Every metric of Tidings, in one place, named `tidings_<area>_<thing>_<unit>`: the outbox and the
 * relay, consumers (every transport), the inbox and sagas. They are ordinary Effect metrics: export
 * them with any Effect metrics exporter (the Hono adapter serves Prometheus).
 * @since 0.1.0
 * @module
 */
import { Effect, Metric } from "effect"

/**
 * Pending events (sampled by the relay's stats loop).
 * @since 0.1.0
 * @category metrics
 */
export const outboxPending: Metric.Gauge<number> = Metric.gauge("tidings_outbox_pending", {
  description: "Outbox events waiting to be published"
})
/**
 * Failed (dead-lettered) events.
 * @since 0.1.0
 * @category metrics
 */
export const outboxFailed: Metric.Gauge<number> = Metric.gauge("tidings_outbox_failed", {
  description: "Outbox events that exhausted their attempts"
})
/**
 * Age of the oldest pending event.
 * @since 0.1.0
 * @category metrics
 */
export const outboxOldestPendingAge: Metric.Gauge<number> = Metric.gauge("tidings_outbox_oldest_pending_age_seconds", {
  description: "Age of the oldest pending outbox event"
})
/**
 * Time from append (occurredAt) to a confirmed publish.
 * @since 0.1.0
 * @category metrics
 */
export const publishLatency: Metric.Histogram<number> = Metric.histogram("tidings_outbox_publish_latency_seconds", {
  description: "Append to confirmed publish",
  boundaries: Metric.exponentialBoundaries({ start: 0.0005, factor: 2, count: 20 })
})
/**
 * Events confirmed by the broker and marked published.
 * @since 0.1.0
 * @category metrics
 */
export const published: Metric.Counter<number> = Metric.counter("tidings_outbox_published_total", {
  description: "Events published",
  incremental: true
})
/**
 * Publish attempts that failed and were rescheduled.
 * @since 0.1.0
 * @category metrics
 */
export const retried: Metric.Counter<number> = Metric.counter("tidings_outbox_retried_total", {
  description: "Events rescheduled after a failed publish",
  incremental: true
})
/**
 * Events moved to the failed (dead-letter) state.
 * @since 0.1.0
 * @category metrics
 */
export const failed: Metric.Counter<number> = Metric.counter("tidings_outbox_failed_total", {
  description: "Events marked failed",
  incremental: true
})
/**
 * Events whose lease expired and were made claimable again.
 * @since 0.1.0
 * @category metrics
 */
export const reclaimed: Metric.Counter<number> = Metric.counter("tidings_outbox_reclaimed_total", {
  description: "Expired claims taken back",
  incremental: true
})
/**
 * Published rows deleted by retention.
 * @since 0.1.0
 * @category metrics
 */
export const pruned: Metric.Counter<number> = Metric.counter("tidings_outbox_pruned_total", {
  description: "Published rows deleted by retention",
  incremental: true
})
/**
 * Relay wake-ups by source: `local` (same process), `notify` (Postgres NOTIFY), `poll` (timer).
 * @since 0.1.0
 * @category metrics
 */
export const wakeups: Metric.Counter<number> = Metric.counter("tidings_relay_wakeups_total", {
  description: "Relay wake-ups by source",
  incremental: true
})
/**
 * Claimed batch sizes.
 * @since 0.1.0
 * @category metrics
 */
export const batchSize: Metric.Histogram<number> = Metric.histogram("tidings_relay_batch_size", {
  description: "Events per claimed batch",
  boundaries: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
})

/**
 * Consumer metrics, shared by every transport (`MemoryBroker.consume`, `@tidings/rabbitmq`'s
 * `AmqpConsumer`) so that dashboards read the same on either. Every series carries a `consumer`
 * attribute.
 * @since 0.1.0
 * @category metrics
 */
export const consumer: {
  /** Deliveries received (including those dead-lettered undecoded). */
  readonly consumed: Metric.Counter<number>
  /** Deliveries acknowledged (handled, or skipped as unknown type). */
  readonly acked: Metric.Counter<number>
  /** Deliveries retried; attribute `mode`: `delayed`, `requeue` or `shutdown`. */
  readonly retried: Metric.Counter<number>
  /** Deliveries dead-lettered; attribute `reason` (the outcome). */
  readonly deadLettered: Metric.Counter<number>
  /** Handler runs that found their database or broker unavailable: the delivery was held and run again, no attempt counted. */
  readonly unavailable: Metric.Counter<number>
  /** Handler defects caught (each also counts as a transient failure). */
  readonly defects: Metric.Counter<number>
  /** Handler duration, attribute `outcome`. */
  readonly handleDuration: Metric.Histogram<number>
} = {
  consumed: Metric.counter("tidings_consumer_consumed_total", {
    description: "Deliveries received",
    incremental: true
  }),
  acked: Metric.counter("tidings_consumer_acked_total", { description: "Deliveries acknowledged", incremental: true }),
  retried: Metric.counter("tidings_consumer_retried_total", {
    description: "Deliveries sent back for another attempt",
    incremental: true
  }),
  deadLettered: Metric.counter("tidings_consumer_dead_lettered_total", {
    description: "Deliveries dead-lettered",
    incremental: true
  }),
  unavailable: Metric.counter("tidings_consumer_unavailable_total", {
    description: "Handler runs that found a dependency unavailable (held and retried, not counted)",
    incremental: true
  }),
  defects: Metric.counter("tidings_consumer_defects_total", {
    description: "Handler defects caught",
    incremental: true
  }),
  handleDuration: Metric.histogram("tidings_consumer_handle_duration_seconds", {
    description: "Time spent in the handler",
    boundaries: Metric.exponentialBoundaries({ start: 0.0005, factor: 2, count: 18 })
  })
} as const

/**
 * Saga metrics (`Saga.run`, `Saga.start`, replies and recovery).
 * @since 0.1.0
 * @category metrics
 */
export const saga: {
  /** Sagas started (`Saga.run` and `Saga.start`). */
  readonly started: Metric.Counter<number>
  /** Sagas that reached a final status, by `status` (completed, compensated, failed). */
  readonly finished: Metric.Counter<number>
  /** Step durations (an action, or a command until its reply), by `saga` and `step`. */
  readonly stepDuration: Metric.Histogram<number>
  /** Compensations that ran to an outcome, by `outcome` (compensated, failed). */
  readonly compensations: Metric.Counter<number>
  /** Sagas taken over by a recovery worker (past their deadline, stuck, or their executor died). */
  readonly recoveries: Metric.Counter<number>
  /** Sagas currently in each status (`status` attribute), refreshed by the recovery worker. */
  readonly byStatus: Metric.Gauge<number>
} = {
  started: Metric.counter("tidings_saga_started_total", { description: "Sagas started", incremental: true }),
  finished: Metric.counter("tidings_saga_finished_total", {
    description: "Sagas finished, by final status",
    incremental: true
  }),
  stepDuration: Metric.histogram("tidings_saga_step_duration_seconds", {
    description: "Saga step duration: action run, or command sent until its reply",
    boundaries: Metric.exponentialBoundaries({ start: 0.001, factor: 2, count: 20 })
  }),
  compensations: Metric.counter("tidings_saga_compensations_total", {
    description: "Saga step compensations, by outcome",
    incremental: true
  }),
  recoveries: Metric.counter("tidings_saga_recoveries_total", {
    description: "Sagas claimed and resumed by a recovery worker",
    incremental: true
  }),
  byStatus: Metric.gauge("tidings_saga_sagas", { description: "Sagas by status" })
} as const

/**
 * Inbox metrics.
 * @since 0.1.0
 * @category metrics
 */
export const inbox: {
  /** Messages handled, by `consumer` and `outcome` (`processed`, `duplicate`, `failed`, `crash_loop`). */
  readonly handled: Metric.Counter<number>
} = {
  handled: Metric.counter("tidings_inbox_handled_total", { description: "Inbox handling outcomes", incremental: true })
} as const

/**
 * Log mode metrics (`LogRelay`, `LogConsumer`): publish and consume counts use the outbox and
 * consumer series above; these are about partitions, leases and the log itself. Series carry a
 * `group` attribute where it applies.
 * @since 0.1.0
 * @category metrics
 */
export const log: {
  readonly partitions: Metric.Gauge<number>
  readonly rebalances: Metric.Counter<number>
  readonly fenced: Metric.Counter<number>
  readonly crashes: Metric.Counter<number>
  readonly heldBack: Metric.Counter<number>
  readonly oldestOpenTransactionAge: Metric.Gauge<number>
  readonly lag: Metric.Gauge<number>
  readonly pruned: Metric.Counter<number>
} = {
  /** Partitions this instance holds, by `group`. */
  partitions: Metric.gauge("tidings_log_partitions_owned", { description: "Log partitions held by this instance" }),
  /** Lease changes, by `group` and `change` (`acquired`, `released`, `lost`). */
  rebalances: Metric.counter("tidings_log_lease_changes_total", {
    description: "Log partition leases acquired, released or lost",
    incremental: true
  }),
  /** Writes refused because another instance took the lease over (fencing), by `group`. */
  fenced: Metric.counter("tidings_log_fenced_total", {
    description: "Log writes refused by the lease fence",
    incremental: true
  }),
  /** Partitions taken over from an owner that died with a batch in flight, by `group`. */
  crashes: Metric.counter("tidings_log_crashes_total", {
    description: "Log partitions taken over after their owner died mid-batch",
    incremental: true
  }),
  /** Reads that found committed events they could not read yet (an older transaction is open), by `group`. */
  heldBack: Metric.counter("tidings_log_held_back_total", {
    description: "Log reads held back by an open transaction",
    incremental: true
  }),
  /** Age of the oldest open transaction: log reads wait for it (the trade-off of never skipping an event). */
  oldestOpenTransactionAge: Metric.gauge("tidings_log_oldest_open_transaction_age_seconds", {
    description: "Age of the oldest open transaction, which holds log reads back"
  }),
  /** Events not yet behind a group's cursors, by `group`. */
  lag: Metric.gauge("tidings_log_lag", { description: "Log events a group has not passed yet" }),
  /** Events deleted by log retention. */
  pruned: Metric.counter("tidings_log_pruned_total", {
    description: "Log events deleted by retention",
    incremental: true
  })
} as const

const zero = (metric: Metric.Counter<number>, attributes?: Record<string, string>): Effect.Effect<void> =>
  Metric.update(attributes === undefined ? metric : Metric.withAttributes(metric, attributes), 0)

/**
 * Registers the relay's counters at zero (every wake-up source too), so that dashboards and
 * `rate()` see the series from the start rather than from the first event. The relay does it when
 * it starts.
 * @since 0.1.0
 * @category initialization
 */
export const initializeRelay: Effect.Effect<void> = Effect.all([
  zero(published),
  zero(retried),
  zero(failed),
  zero(reclaimed),
  zero(pruned),
  ...["local", "notify", "poll"].map((source) => zero(wakeups, { source }))
], { discard: true })

/**
 * Registers a consumer's counters at zero (`consumer` attribute), as {@link initializeRelay} does
 * for the relay. Every consumer does it when it starts.
 * @since 0.1.0
 * @category initialization
 */
export const initializeConsumer = (name: string): Effect.Effect<void> =>
  Effect.all([
    ...[consumer.consumed, consumer.acked, consumer.unavailable, consumer.defects].map((m) =>
      zero(m, { consumer: name })
    ),
    ...["delayed", "requeue"].map((mode) => zero(consumer.retried, { consumer: name, mode })),
    ...["PermanentFailure", "DeliveryLimit"].map((reason) => zero(consumer.deadLettered, { consumer: name, reason }))
  ], { discard: true })

/**
 * Registers the saga counters at zero (every final status and compensation outcome too). The saga
 * recovery worker does it when it starts.
 * @since 0.1.0
 * @category initialization
 */
export const initializeSagas: Effect.Effect<void> = Effect.all([
  zero(saga.started),
  zero(saga.recoveries),
  ...["completed", "compensated", "failed"].map((status) => zero(saga.finished, { status })),
  ...["compensated", "failed"].map((outcome) => zero(saga.compensations, { outcome }))
], { discard: true })

/**
 * Registers a log group member's counters at zero (`group` attribute; every lease change too), as
 * {@link initializeRelay} does for the relay. `LogRelay` also registers the outbox series it
 * counts (published, retried, failed) and retention's; `LogConsumer` the consumer series
 * ({@link initializeConsumer}). Every member does it when it starts.
 * @since 0.1.0
 * @category initialization
 */
export const initializeLog = (group: string, role: "relay" | "consumer"): Effect.Effect<void> =>
  Effect.all([
    ...["acquired", "released", "lost"].map((change) => zero(log.rebalances, { group, change })),
    ...[log.fenced, log.crashes, log.heldBack].map((m) => zero(m, { group })),
    ...(role === "relay"
      ? [zero(published), zero(retried), zero(failed), zero(log.pruned)]
      : [initializeConsumer(group)])
  ], { discard: true })
