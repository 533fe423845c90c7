/**
 * Consumer groups on PostgreSQL, with PostgreSQL as the transport: a group reads the log of
 * `PgLogStore` with its own cursors and runs a handler per event, in order per partition. The
 * handlers of a batch, everything they write through the app's `SqlClient` (and the events they
 * append with `Outbox.append`), and the cursor's move commit in **one transaction**: effects happen
 * exactly once, without an inbox row. A crash, a lost lease or a failure rolls all of it back, and
 * the events are handled again by whoever holds the partition next.
 *
 * ```ts
 * PgLogConsumer.layer({
 *   schema: "tidings",
 *   group: "billing",
 *   handler: (delivery) => Effect.gen(function*() {
 *     const sql = yield* SqlClient.SqlClient
 *     yield* sql`INSERT INTO invoices ${sql.insert({ order_id: delivery.aggregateId })}`
 *   })
 * })
 * ```
 *
 * Decisions (retry with backoff, dead-letter into the outbox's `failed` rows, pause on outages), crash
 * loops, leases and rebalancing are `LogConsumer`'s. Several groups read one log independently.
 * Consumers in other processes than the producers are woken by `NOTIFY` (`PgLogStore` with
 * `notify: true` on the producers' side, `PgWakeup.layer()` on the consumers'), or poll.
 * @since 0.1.0
 * @module
 */
import type { InvalidConfig, StoreError } from "@tidings/core/Errors"
import * as LogConsumer from "@tidings/core/LogConsumer"
import type { LogStore } from "@tidings/core/LogStore"
import type { OutboxStore } from "@tidings/core/OutboxStore"
import { Layer, type Scope } from "effect"
import type { SqlClient } from "effect/sql"
import * as PgLogStore from "./PgLogStore.ts"

/**
 * Options: the log's schema (and partition count, if this process creates it) and the consumer's
 * settings (`LogConsumer.Config`).
 * @since 0.1.0
 * @category config
 */
export type Options<E, R> = LogConsumer.Config<E, R> & {
  /** Schema of the log (see `Migrator`); default `tidings`. */
  readonly schema?: string
  readonly partitions?: number
}

/**
 * A member of the consumer group over the app's `SqlClient`. The handler's requirements other than
 * the log's own services come from the app.
 * @since 0.1.0
 * @category layers
 */
export const layer = <E, R>(
  options: Options<E, R>
): Layer.Layer<
  LogConsumer.LogConsumer,
  InvalidConfig | StoreError,
  SqlClient.SqlClient | Exclude<R, LogStore | OutboxStore | Scope.Scope>
> => {
  const { partitions, schema, ...config } = options
  return LogConsumer.layer(config).pipe(
    Layer.provide(
      PgLogStore.layer({
        ...(schema === undefined ? {} : { schema }),
        ...(partitions === undefined ? {} : { partitions })
      })
    )
  ) as Layer.Layer<
    LogConsumer.LogConsumer,
    InvalidConfig | StoreError,
    SqlClient.SqlClient | Exclude<R, LogStore | OutboxStore | Scope.Scope>
  >
}
