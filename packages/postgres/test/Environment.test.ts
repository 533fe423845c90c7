import { assert, describe, it } from "@effect/vitest"
import { InvalidConfig } from "@tidings/core/Errors"
import { OutboxStore } from "@tidings/core/OutboxStore"
import { SagaStore } from "@tidings/core/SagaStore"
import * as Settings from "@tidings/core/Settings"
import { ConfigProvider, Effect, Exit, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { inject } from "vitest"
import * as Migrator from "../src/Migrator.ts"
import * as PgClient from "../src/PgClient.ts"
import * as PgInboxStore from "../src/PgInboxStore.ts"
import * as PgOutboxStore from "../src/PgOutboxStore.ts"
import * as PgSagaStore from "../src/PgSagaStore.ts"

const url = inject("pgUrl")
const schema = `env_${Math.random().toString(36).slice(2, 10)}`
const env = (vars: Record<string, string>) => ConfigProvider.layer(ConfigProvider.fromEnv({ env: vars }))

const invalidOf = <A, E>(exit: Exit.Exit<A, E>): InvalidConfig => {
  assert.isTrue(Exit.isFailure(exit))
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined
  assert.instanceOf(error, InvalidConfig)
  return error as InvalidConfig
}

describe("Postgres settings from the environment", () => {
  it.live("PgClient and the stores from TIDINGS_PG_* and TIDINGS_SCHEMA: same client, same tables", () =>
    Effect.gen(function*() {
      const Database = PgClient.layerConfig()
      const Stores = Layer.mergeAll(PgOutboxStore.layerConfig(), PgInboxStore.layerConfig(), PgSagaStore.layerConfig())
      const app = Stores.pipe(
        Layer.provideMerge(Database),
        Layer.provide(env({
          TIDINGS_PG_URL: url,
          TIDINGS_PG_APPLICATION_NAME: "env-test",
          TIDINGS_PG_MAX_CONNECTIONS: "3",
          TIDINGS_SCHEMA: schema,
          TIDINGS_OUTBOX_NOTIFY: "in-transaction"
        }))
      )
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* Migrator.run({ schema })
        const [row] = yield* sql<{ name: string }>`SELECT current_setting('application_name') AS name`
        assert.strictEqual(row!.name, "env-test")
        // The stores work on the schema the variable named.
        const stats = yield* OutboxStore.use((s) => s.stats)
        assert.strictEqual(stats.pending, 0)
        assert.deepStrictEqual(yield* SagaStore.use((s) => s.list({ limit: 1 })), [])
        yield* sql`DROP SCHEMA ${sql(schema)} CASCADE`
      }).pipe(Effect.provide(app))
    }))

  it.effect("a wrong configuration names every wrong variable at once, never the password", () =>
    Effect.gen(function*() {
      const vars = env({
        TIDINGS_PG_URL: "mysql://app:Secret-Pa55@db/app",
        TIDINGS_PG_MAX_CONNECTIONS: "many",
        TIDINGS_PG_CONNECT_TIMEOUT: "soon",
        TIDINGS_SCHEMA: "Bad-Schema",
        TIDINGS_OUTBOX_BOOKKEEPING_COMMIT: "later"
      })
      const all = yield* Effect.exit(
        Settings.all({
          pg: Settings.read(PgClient.environment),
          outbox: Settings.read(PgOutboxStore.environment)
        }).pipe(Effect.provide(vars))
      )
      const error = invalidOf(all)
      assert.deepStrictEqual(error.issues!.map((i) => i.path), [
        "TIDINGS_PG_URL",
        "TIDINGS_PG_MAX_CONNECTIONS",
        "TIDINGS_PG_CONNECT_TIMEOUT",
        "TIDINGS_SCHEMA",
        "TIDINGS_OUTBOX_BOOKKEEPING_COMMIT"
      ])
      assert.notInclude(error.message, "Secret-Pa55")
      // The layer fails the same way.
      const built = yield* Effect.exit(Layer.build(PgClient.layerConfig()).pipe(Effect.scoped, Effect.provide(vars)))
      assert.deepStrictEqual(invalidOf(built).issues!.map((i) => i.path), [
        "TIDINGS_PG_URL",
        "TIDINGS_PG_MAX_CONNECTIONS",
        "TIDINGS_PG_CONNECT_TIMEOUT"
      ])
      const missing = yield* Effect.exit(
        Layer.build(PgClient.layerConfig()).pipe(Effect.scoped, Effect.provide(env({})))
      )
      assert.deepStrictEqual(invalidOf(missing).issues, [{
        path: "TIDINGS_PG_URL",
        message: "is required but not set"
      }])
    }))
})
