/**
 * Rebuilding a projection on Postgres: replay the outbox history that has not been pruned into a
 * fresh copy of the read table, then swap it in, in one transaction.
 *
 * While it runs, the rebuild holds the projection's lock exclusively, so live event handling for
 * that projection (`Projection.handle`, which takes the lock shared) waits and then continues on the
 * new table, skipping the events the rebuild already applied (by the rebuilt positions). Other
 * projections are not affected. The replay can only be as complete as the outbox: events pruned by
 * the relay's retention are gone, and a rebuild that meets a version gap fails with
 * {@link RebuildGap} and changes nothing.
 * @module
 */
import type { InvalidConfig, StoreError } from "@tidings/core/Errors"
import type { Message } from "@tidings/core/Message"
import type { Definition } from "@tidings/core/Projection"
import * as Settings from "@tidings/core/Settings"
import { type Cause, Effect, Schema } from "effect"
import { SqlClient, SqlError } from "effect/sql"
import { resolveSchema } from "./internal/identifier.ts"
import { type OutboxRow, toMessage } from "./internal/outboxRow.ts"
import { fromSqlError } from "./internal/storeError.ts"
import { projectionLockKey } from "./PgInboxStore.ts"

const RebuildGapBase: Schema.Class<
  RebuildGap,
  Schema.TaggedStruct<"RebuildGap", {
    readonly projection: Schema.String
    readonly aggregateId: Schema.String
    readonly applied: Schema.Int
    readonly version: Schema.Int
  }>,
  Cause.YieldableError
> = Schema.TaggedError<RebuildGap>()("RebuildGap", {
  projection: Schema.String,
  aggregateId: Schema.String,
  applied: Schema.Int,
  version: Schema.Int
})

/**
 * The outbox no longer holds an event the rebuild needs (pruned): nothing was changed.
 * @since 0.1.0
 * @category errors
 */
export class RebuildGap extends RebuildGapBase {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * Options of {@link rebuild}.
 * @since 0.1.0
 * @category models
 */
export interface Options<A> {
  /** Schema of the Tidings tables (outbox, positions); default `tidings`. */
  readonly schema?: string
  /** The projection's event from an outbox message, or `undefined` for messages it does not handle. */
  readonly fromMessage: (message: Message) => A | undefined
  /** Outbox rows read per query (default 1,000). */
  readonly batchSize?: number
}

/**
 * What the rebuild did.
 * @since 0.1.0
 * @category models
 */
export interface Rebuilt {
  readonly applied: number
  readonly aggregates: number
}

/**
 * The data options of {@link rebuild}, with their defaults.
 * @since 0.1.0
 * @category settings
 */
export const OptionsSchema: Schema.Struct<{
  readonly schema: Schema.optional<Schema.String>
  readonly batchSize: Settings.Defaulted<Settings.IntSetting>
}> = Schema.Struct({
  schema: Schema.optional(Schema.String),
  batchSize: Settings.int(1, 100_000).pipe(Schema.withDecodingDefault(Effect.succeed(1000)))
})

const identifier = /^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,53}$/

interface Row extends OutboxRow {
  readonly seq: string | number
}

/**
 * Replays the outbox (every row still there, in append order) into a fresh copy of the projection's
 * table (`CREATE TABLE … (LIKE table INCLUDING ALL)`), resets the projection's positions to what the
 * replay applied, and renames the fresh table into place, all in one transaction.
 * @since 0.1.0
 * @category combinators
 */
export const rebuild = <A, E, R>(
  projection: Definition<A, E, R>,
  options: Options<A>
): Effect.Effect<Rebuilt, E | RebuildGap | InvalidConfig | StoreError, R | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const settings = yield* Settings.decode(OptionsSchema, options)
    const schema = yield* resolveSchema(settings.schema)
    if (!identifier.test(projection.table)) {
      return yield* Settings.invalid([{
        path: "table",
        message: `invalid table name ${JSON.stringify(projection.table).slice(0, 80)}`
      }])
    }
    const sql = yield* SqlClient.SqlClient
    const parts = projection.table.split(".")
    const base = parts[parts.length - 1]!
    const prefix = parts.length > 1 ? `${parts[0]}.` : ""
    const fresh = `${prefix}${base}__rebuild`
    const old = `${base}__old`
    const batchSize = settings.batchSize
    return yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`SELECT pg_advisory_xact_lock(hashtext(${projectionLockKey(schema, projection.name)}))`
      yield* sql`DROP TABLE IF EXISTS ${sql(fresh)}`
      yield* sql`CREATE TABLE ${sql(fresh)} (LIKE ${sql(projection.table)} INCLUDING ALL)`
      const positions = new Map<string, number>()
      let applied = 0
      let after = 0n
      while (true) {
        const rows = yield* sql<
          Row
        >`SELECT id, seq, event_type, event_version, aggregate_type, aggregate_id, ordering_key,
            payload::text AS payload, headers::text AS headers, (extract(epoch FROM occurred_at) * 1000)::float8 AS occurred_at_ms
          FROM ${sql(`${schema}.outbox`)} WHERE seq > ${after.toString()} ORDER BY seq LIMIT ${batchSize}`
        for (const row of rows) {
          const event = options.fromMessage(toMessage(row))
          if (event === undefined) continue
          const { aggregateId, version } = projection.position(event)
          const current = positions.get(aggregateId) ?? 0
          if (version <= current) continue
          if (version > current + 1) {
            return yield* new RebuildGap({ projection: projection.name, aggregateId, applied: current, version })
          }
          yield* projection.apply(event, { table: fresh })
          positions.set(aggregateId, version)
          applied++
        }
        if (rows.length < batchSize) break
        after = BigInt(rows[rows.length - 1]!.seq)
      }
      const table = sql(`${schema}.projection_position`)
      yield* sql`DELETE FROM ${table} WHERE projection = ${projection.name}`
      if (positions.size > 0) {
        const json = JSON.stringify([...positions].map(([aggregate_id, position]) => ({ aggregate_id, position })))
        yield* sql`INSERT INTO ${table} (projection, aggregate_id, position)
          SELECT ${projection.name}, p.aggregate_id, p.position FROM jsonb_to_recordset(${json}::jsonb) AS p(aggregate_id text, position bigint)`
      }
      yield* sql`ALTER TABLE ${sql(projection.table)} RENAME TO ${sql(old)}`
      yield* sql`ALTER TABLE ${sql(fresh)} RENAME TO ${sql(base)}`
      yield* sql`DROP TABLE ${sql(`${prefix}${old}`)}`
      return { applied, aggregates: positions.size }
    })).pipe(
      Effect.catchIf(SqlError.isSqlError, (e) => Effect.fail(fromSqlError("projection.rebuild", e)))
    )
  }).pipe(Effect.withSpan("tidings.projection.rebuild", { attributes: { "tidings.projection": projection.name } }))
