/**
 * Crash recovery across processes: a process running sagas is killed (SIGKILL) between two steps;
 * recovery workers in three other processes race for the sagas, and each saga's completed steps
 * are compensated exactly once.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Saga from "@tidings/core/Saga"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as path from "node:path"
import { freshSchema, pgClientLayer, pgUrl } from "../../../test/support/pg.ts"
import { exited, spawnScript, waitForOutput } from "../../../test/support/processes.ts"
import { eventually } from "../../../test/support/progress.ts"
import * as PgSagaStore from "../src/PgSagaStore.ts"

const script = path.join(import.meta.dirname, "fixtures", "sagaProcess.ts")
const COUNT = 4

describe("saga recovery across processes", () => {
  it.live("a process killed between two steps is compensated exactly once by recovery workers in three processes", () =>
    Effect.scoped(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* freshSchema("sagamp")
      yield* sql`CREATE TABLE ${sql(`${schema}.effects`)} (
        seq bigint GENERATED ALWAYS AS IDENTITY, saga_id uuid NOT NULL, step text NOT NULL, kind text NOT NULL, pid int NOT NULL)`
      const env = { TIDINGS_TEST_PG_URL: pgUrl(), SCHEMA: schema, COUNT: String(COUNT) }
      // The doomed process runs its sagas to the third step before the workers start: until the kill
      // no worker competes for them, so a heartbeat that a loaded machine delays cannot hand a saga
      // to a worker while its executor still runs it. The lease (3 s, a heartbeat every second) is
      // what recovery waits for after the kill.
      const doomed = spawnScript(script, { ...env, MODE: "run", LEASE_MS: "3000" })
      yield* Effect.addFinalizer(() => Effect.sync(() => doomed.exitCode === null && doomed.kill("SIGKILL")))
      yield* Effect.promise(() => waitForOutput(doomed, "between"))
      const workers = [1, 2, 3].map(() => spawnScript(script, { ...env, MODE: "recover" }))
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => workers.forEach((w) => w.exitCode === null && w.kill("SIGKILL")))
      )
      yield* Effect.promise(() => Promise.all(workers.map((w) => waitForOutput(w, "ready"))))

      // the sagas are claimed by the doomed process, steps 1 and 2 done, step 3 running
      const before = yield* sql<{ id: string; status: string; claimed_by: string | null }>`
        SELECT id, status, claimed_by FROM ${sql(`${schema}.saga`)} ORDER BY id`
      assert.strictEqual(before.length, COUNT)
      for (const s of before) assert.deepStrictEqual([s.status, s.claimed_by !== null], ["running", true])
      doomed.kill("SIGKILL")
      assert.strictEqual(yield* Effect.promise(() => exited(doomed)), "SIGKILL")
      const killedAt = Date.now()

      const states = () =>
        Effect.forEach(before, (s) => Saga.get(s.id)).pipe(Effect.provide(PgSagaStore.layer({ schema })))
      // Recovery starts once the doomed process's claims expire; the wait goes on while the sagas move.
      yield* eventually(states(), (ss) => ss.every((s) => s.status === "compensated"), {
        what: "every saga compensated",
        progress: (ss) => ss.map((s) => [s.status, s.claimedBy, s.steps.map((st) => st.status)])
      })
      const recoveredAfter = Date.now() - killedAt
      // Stop the workers: each closes its recovery worker, which waits for any compensation still
      // under way, so that every side effect a duplicate could have is in the table before counting.
      for (const w of workers) w.kill("SIGTERM")
      yield* Effect.promise(() => Promise.all(workers.map(exited)))
      // (the exit status is not compared: Deno reports a child sent SIGTERM as killed by it, even when it handled it)
      for (const w of workers) assert.include(w.output(), "stopped", w.output())

      const effects = yield* sql<{ saga_id: string; step: string; kind: string; pid: number }>`
        SELECT saga_id, step, kind, pid FROM ${sql(`${schema}.effects`)} ORDER BY seq`
      const workerPids = new Set(workers.map((w) => w.pid))
      for (const s of before) {
        const mine = effects.filter((e) => e.saga_id === s.id)
        assert.deepStrictEqual(mine.map((e) => `${e.kind}:${e.step}`), [
          "action:reserve",
          "action:charge",
          "compensate:charge",
          "compensate:reserve"
        ], s.id)
        assert.strictEqual(mine[0]!.pid, doomed.pid)
        const compensators = new Set(mine.slice(2).map((e) => e.pid))
        assert.strictEqual(compensators.size, 1, "one worker compensated the whole saga")
        assert.isTrue(workerPids.has([...compensators][0]), "by a recovery worker")
      }
      const final = yield* states()
      for (const state of final) {
        assert.deepStrictEqual(state.steps.map((st) => [st.status, st.compensationAttempts]), [["compensated", 1], [
          "compensated",
          1
        ], ["failed", 0]])
        assert.match(state.error!, /step confirm was interrupted: its executor saga-\w+ stopped \(claim expired\)/)
        assert.isNull(state.claimedBy)
      }
      const printed = workers.flatMap((w) => w.output().split("\n").filter((l) => l.startsWith("compensated ")))
      assert.strictEqual(printed.length, COUNT * 2, workers.map((w) => w.output()).join("\n---\n"))
      console.log(
        `recovered ${COUNT} sagas ${recoveredAfter} ms after the kill; compensations by worker: ${
          workers.map((w) => w.output().split("\n").filter((l) => l.startsWith("compensated ")).length).join("/")
        }`
      )
    })).pipe(Effect.provide(Layer.fresh(pgClientLayer()))))
})
