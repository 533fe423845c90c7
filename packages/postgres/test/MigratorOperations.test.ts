/**
 * The Migrator as an operator runs it on a live database: locks held per migration, a schema owner
 * without CREATE on the database, an app role that gets only what the stores use, the schema-name
 * limit, and the SQL it prints.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { failureTag } from "@tidings/core/testing"
import { Context, Deferred, Duration, Effect, Fiber, Layer, Schema, type Scope } from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import { pgUrl, schemaName } from "../../../test/support/pg.ts"
import { splitStatements } from "../scripts/compile-migrations.ts"
import { appTables } from "../src/internal/migrationSql.ts"
import * as Migrator from "../src/Migrator.ts"
import { layer as pgLayer } from "../src/PgClient.ts"
import * as PgInboxStore from "../src/PgInboxStore.ts"
import * as PgLogStore from "../src/PgLogStore.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"
import * as PgSagaStore from "../src/PgSagaStore.ts"

const Tick = Event.define("tick", { aggregateType: "clock", schema: Schema.Struct({ n: Schema.Int }) })

/** A SqlClient on our driver, for the scope, as `user` (default: the test server's superuser). */
const client = (options: { readonly user?: string; readonly maxConnections?: number } = {}) =>
  Effect.gen(function*() {
    const url = new URL(pgUrl())
    if (options.user !== undefined) {
      url.username = options.user
      url.password = "pw"
    }
    const context = yield* Layer.build(pgLayer({ url: url.toString(), maxConnections: options.maxConnections ?? 4 }))
    return Context.get(context, SqlClient.SqlClient)
  })

const as = <A, E>(sql: SqlClient.SqlClient, effect: Effect.Effect<A, E, SqlClient.SqlClient | Scope.Scope>) =>
  Effect.provideService(effect, SqlClient.SqlClient, sql)

const dropSchema = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.addFinalizer(() => Effect.ignore(sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`))

const code = (error: unknown) => ((error as SqlError.SqlError).reason?.cause as { code?: string } | undefined)?.code

describe("Migrator on a live database", () => {
  it.live(
    "0005 validates in a transaction of its own: writers are not blocked while it checks the rows",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const sql = yield* client({ maxConnections: 6 })
        const schema = schemaName("lock")
        yield* dropSchema(sql, schema)
        yield* as(sql, Migrator.run({ schema }))
        // back to 0005 pending, with rows to check
        const outbox = sql(`${schema}.outbox`)
        const insert =
          sql`INSERT INTO ${outbox} (id, aggregate_type, aggregate_id, ordering_key, event_type, event_version, payload, occurred_at)
        SELECT gen_random_uuid(), 'a', 'b', 'k', 't', 1, '{}', now() FROM generate_series(1, 100)`
        yield* insert
        yield* sql`ALTER TABLE ${outbox} DROP CONSTRAINT outbox_claim_check`
        yield* sql`DELETE FROM ${sql(`${schema}.tidings_migrations`)} WHERE version = 5`
        // Another session holds the migrations table, so the run stops where it records version 5,
        // i.e. after VALIDATE, inside that migration's last transaction.
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* sql`LOCK TABLE ${sql(`${schema}.tidings_migrations`)} IN SHARE MODE`
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(release)
        })))
        yield* Deferred.await(locked)
        const migrating = yield* Effect.forkChild(as(sql, Migrator.run({ schema })))
        const waiting = () =>
          sql<
            { pid: number }
          >`SELECT pid FROM pg_locks WHERE relation = ${`${schema}.tidings_migrations`}::regclass AND NOT granted`
        let pid: number | undefined
        while (pid === undefined) {
          pid = (yield* waiting())[0]?.pid
          if (pid === undefined) yield* Effect.sleep("10 millis")
        }
        // the waiting migrator holds no ACCESS EXCLUSIVE lock on the outbox...
        const held = yield* sql<
          { mode: string }
        >`SELECT mode FROM pg_locks WHERE pid = ${pid} AND relation = ${`${schema}.outbox`}::regclass AND granted`
        assert.notInclude(held.map((l) => l.mode), "AccessExclusiveLock", JSON.stringify(held))
        assert.include(held.map((l) => l.mode), "ShareUpdateExclusiveLock", "VALIDATE's lock")
        // ...so a writer goes through while it waits
        yield* insert
        assert.strictEqual((yield* waiting()).length, 1, "the migrator was still waiting when the insert committed")
        assert.isUndefined(migrating.pollUnsafe(), "and had not finished")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        const applied = yield* Fiber.join(migrating)
        assert.deepStrictEqual(applied.map((m) => m.version), [5])
        const [constraint] = yield* sql<{ convalidated: boolean }>`SELECT convalidated FROM pg_constraint
        WHERE conname = 'outbox_claim_check' AND conrelid = ${`${schema}.outbox`}::regclass`
        assert.isTrue(constraint!.convalidated)
      })),
    600_000
  )

  it.live(
    "a schema owner without CREATE on the database migrates; the app role gets only what the stores use",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const admin = yield* client()
        const suffix = Math.random().toString(36).slice(2, 10)
        const owner = `tidings_owner_${suffix}`
        const app = `tidings_app_${suffix}`
        const schema = schemaName("priv")
        yield* Effect.addFinalizer(() =>
          Effect.ignore(Effect.gen(function*() {
            yield* admin`DROP SCHEMA IF EXISTS ${admin(schema)} CASCADE`
            yield* admin.unsafe(`DROP ROLE IF EXISTS "${app}"`)
            yield* admin.unsafe(`DROP ROLE IF EXISTS "${owner}"`)
          }))
        )
        yield* admin.unsafe(`CREATE ROLE "${owner}" LOGIN PASSWORD 'pw' NOSUPERUSER NOCREATEDB NOCREATEROLE`)
        yield* admin.unsafe(`CREATE ROLE "${app}" LOGIN PASSWORD 'pw' NOSUPERUSER NOCREATEDB NOCREATEROLE`)
        // the DBA creates the schema for its owner, who has no CREATE on the database
        yield* admin.unsafe(`CREATE SCHEMA "${schema}" AUTHORIZATION "${owner}"`)
        const [rights] = yield* admin<
          { create: boolean }
        >`SELECT has_database_privilege(${owner}, current_database(), 'CREATE') AS create`
        assert.isFalse(rights!.create)

        const asOwner = yield* client({ user: owner })
        const applied = yield* as(asOwner, Migrator.run({ schema, grantTo: app }))
        assert.deepStrictEqual(applied.map((m) => m.version), Migrator.all.map((m) => m.version))
        assert.deepStrictEqual(
          yield* as(asOwner, Migrator.run({ schema, grantTo: app })),
          [],
          "idempotent, grants again"
        )

        // every table the migrations create is the app's to use (a new migration's table must be added)
        const tables = yield* admin<{ name: string; write: boolean; read: boolean }>`
        SELECT table_name AS name, has_table_privilege(${app}, quote_ident(table_schema) || '.' || table_name, 'INSERT,UPDATE,DELETE') AS write,
          has_table_privilege(${app}, quote_ident(table_schema) || '.' || table_name, 'SELECT') AS read
        FROM information_schema.tables WHERE table_schema = ${schema} ORDER BY 1`
        for (const table of tables) {
          assert.isTrue(table.read, table.name)
          assert.strictEqual(table.write, table.name !== "tidings_migrations", table.name)
        }
        assert.sameMembers(tables.map((t) => t.name).filter((n) => n !== "tidings_migrations"), [...appTables])

        // the app runs the stores
        const asApp = yield* client({ user: app })
        yield* as(
          asApp,
          Effect.gen(function*() {
            assert.deepStrictEqual(yield* Migrator.run({ schema }), [], "up to date: nothing to do, no DDL needed")
            const outbox = yield* PgOutboxStore.make({ schema, notify: "in-transaction" })
            const [message] = yield* outbox.withTransaction(
              Outbox.appendAll([Tick.make({ aggregateId: "a", payload: { n: 1 } })])
            ).pipe(
              Effect.provideService(OutboxStore, outbox)
            )
            const claimed = yield* outbox.claim({ relayId: "r1", batchSize: 10, lease: Duration.seconds(30) })
            assert.deepStrictEqual(claimed.map((c) => c.message.id), [message!.id])
            assert.strictEqual(yield* outbox.settle("r1", { published: [message!.id], retry: [], failed: [] }), 1)
            const inbox = yield* PgInboxStore.make({ schema })
            yield* inbox.begin("m1", "c1", "i1")
            assert.isTrue(yield* inbox.withTransaction(inbox.markProcessed("m1", "c1")))
            assert.strictEqual((yield* inbox.get("m1", "c1"))?.status, "processed")
            yield* inbox.withTransaction(
              Effect.andThen(inbox.lockPosition("p", "agg"), inbox.setPosition("p", "agg", 1))
            )
            assert.strictEqual(yield* inbox.position("p", "agg"), 1)
            const sagas = yield* PgSagaStore.make({ schema })
            const saga = yield* sagas.create({
              id: crypto.randomUUID(),
              type: "order",
              input: { n: 1 },
              steps: ["reserve", "charge"]
            })
            const updated = yield* sagas.update(saga.id, saga.version, {
              currentStep: 1,
              steps: [{ index: 0, status: "completed", result: { ok: true } }]
            })
            assert.strictEqual(updated.currentStep, 1)
            // log mode: append, a group's lease, read, settle (a failed event to the outbox table), retention, retry
            const logs = yield* PgLogStore.make({ schema, partitions: 1, notify: true })
            const [event] = yield* logs.outbox.withTransaction(
              Outbox.appendAll([Tick.make({ aggregateId: "b", payload: { n: 2 } })])
            ).pipe(
              Effect.provideService(OutboxStore, logs.outbox)
            )
            assert.deepStrictEqual(
              yield* logs.log.join({ group: "g", member: "m", lease: Duration.seconds(30), startFrom: "earliest" }),
              ["m"]
            )
            const [state] = yield* logs.log.acquire("g", "m", [0], Duration.seconds(30))
            const request = { partition: 0, epoch: state!.epoch, after: state!.cursor, limit: 10 }
            let read = yield* logs.log.read("g", "m", [request])
            // another test's open transaction may hold the log back a moment
            while (read.events.length === 0) {
              read = yield* Effect.andThen(Effect.sleep("20 millis"), logs.log.read("g", "m", [request]))
            }
            assert.deepStrictEqual(
              read.events.map((e) => e.message.id),
              [event!.id]
            )
            const head = read.events[0]!
            yield* logs.log.settle("g", "m", [{
              partition: 0,
              epoch: state!.epoch,
              cursor: head.position,
              failed: [{ event: head, error: "refused", attempts: 1 }]
            }])
            assert.strictEqual(yield* logs.log.prune({ olderThan: Duration.zero, limit: 10 }), 1)
            assert.strictEqual((yield* logs.outbox.list({ status: "failed", limit: 10 }))[0]?.message.id, event!.id)
            assert.strictEqual(yield* logs.outbox.retryFailed(), 1)
            yield* logs.log.horizon
          })
        )
        // ...and cannot change the schema
        for (
          const ddl of [
            `DROP TABLE "${schema}".outbox`,
            `ALTER TABLE "${schema}".outbox ADD COLUMN evil int`,
            `CREATE TABLE "${schema}".evil (x int)`,
            `TRUNCATE "${schema}".inbox`,
            `DROP SCHEMA "${schema}" CASCADE`
          ]
        ) {
          const error = yield* Effect.flip(asApp.unsafe(ddl))
          assert.strictEqual(code(error), "42501", ddl)
        }
      })),
    600_000
  )

  it.live(
    "schema names up to 48 characters work end to end (the NOTIFY channel fits); longer ones are a typed error",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const sql = yield* client()
        const schema = `lim_${Math.random().toString(36).slice(2, 8)}_`.padEnd(48, "x")
        assert.strictEqual(schema.length, 48)
        yield* dropSchema(sql, schema)
        yield* as(
          sql,
          Effect.gen(function*() {
            yield* Migrator.run({ schema })
            const outbox = yield* PgOutboxStore.make({ schema, notify: "in-transaction" })
            const written = yield* outbox.withTransaction(
              Outbox.appendAll([Tick.make({ aggregateId: "a", payload: { n: 1 } })])
            ).pipe(
              Effect.provideService(OutboxStore, outbox)
            )
            assert.strictEqual(written.length, 1)
            const logs = yield* PgLogStore.make({ schema, notify: true })
            assert.strictEqual(
              (yield* logs.outbox.withTransaction(
                Outbox.appendAll([Tick.make({ aggregateId: "b", payload: { n: 2 } })])
              ).pipe(
                Effect.provideService(OutboxStore, logs.outbox)
              )).length,
              1
            )
            const tooLong = schema + "y"
            for (
              const exit of [
                yield* Effect.exit(Migrator.run({ schema: tooLong })),
                yield* Effect.exit(Migrator.pending({ schema: tooLong })),
                yield* Effect.exit(Migrator.render({ schema: tooLong })),
                yield* Effect.exit(PgOutboxStore.make({ schema: tooLong })),
                yield* Effect.exit(PgInboxStore.make({ schema: tooLong })),
                yield* Effect.exit(PgSagaStore.make({ schema: tooLong })),
                yield* Effect.exit(PgLogStore.make({ schema: tooLong }))
              ]
            ) {
              assert.strictEqual(failureTag(exit), "InvalidConfig")
            }
            assert.strictEqual(failureTag(yield* Effect.exit(Migrator.run({ schema, grantTo: "" }))), "InvalidConfig")
          })
        )
      })),
    600_000
  )

  it.live("pending and render give the SQL that run executes", () =>
    Effect.scoped(Effect.gen(function*() {
      const sql = yield* client()
      const schema = schemaName("sql")
      yield* dropSchema(sql, schema)
      const pending = yield* as(sql, Migrator.pending({ schema }))
      assert.deepStrictEqual(pending.map((m) => m.version), Migrator.all.map((m) => m.version))
      for (const m of pending) {
        assert.match(m.sql, /^BEGIN;\nSELECT pg_advisory_xact_lock/)
        assert.include(m.sql, `INSERT INTO "${schema}".tidings_migrations (version, name) VALUES (${m.version},`)
      }
      assert.strictEqual(
        pending.find((m) => m.version === 5)!.sql.match(/^COMMIT;$/gm)?.length,
        2,
        "0005 commits twice"
      )
      // The rendered script, run statement by statement on one connection, migrates and grants.
      const script = yield* Migrator.render({ schema, grantTo: "pg_monitor" })
      const single = yield* client({ maxConnections: 1 })
      for (const statement of splitStatements(script)) yield* single.unsafe(statement)
      assert.deepStrictEqual(yield* as(sql, Migrator.pending({ schema })), [])
      assert.deepStrictEqual(yield* as(sql, Migrator.run({ schema })), [])
      const [granted] = yield* sql<
        { ok: boolean }
      >`SELECT has_table_privilege('pg_monitor', ${`${schema}.outbox`}, 'INSERT') AS ok`
      assert.isTrue(granted!.ok)
    })), 600_000)
})
