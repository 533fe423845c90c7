/**
 * The saga example (`node examples/sagas/main.ts`) runs against the test server and tells the story
 * it should: completed, declined, timed out and out-of-stock orders, then the asynchronous ones.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { pgUrl } from "../../../test/support/pg.ts"
import { runExample } from "../../../test/support/processes.ts"

const script = path.join(import.meta.dirname, "../../../examples/sagas/main.ts")

describe("examples/sagas", () => {
  it.live("runs the create-order saga synchronously and over the outbox", () =>
    Effect.gen(function*() {
      const { code, output } = yield* Effect.promise(() => runExample(script, { TIDINGS_PG_URL: pgUrl() }))
      assert.strictEqual(code, 0, output)
      const lines = output.split("\n").filter((l) => l.startsWith("[sagas]"))
      const find = (pattern: RegExp) => lines.find((l) => pattern.test(l))
      assert.match(find(/-1 \(2 × book/)!, /completed in/)
      assert.match(find(/-2 \(1 × book, 900/)!, /SagaStepFailed/)
      assert.match(find(/-3 \(1 × book, 666/)!, /SagaStepTimeout/)
      assert.match(find(/-4 \(50 × book/)!, /SagaStepFailed/)
      assert.strictEqual(lines.filter((l) => /Saga.get → compensated/.test(l)).length, 3)
      assert.match(find(/-5: completed/)!, /confirm-order=completed/)
      assert.match(find(/-6: compensated/)!, /reserve-inventory=compensated, charge-payment=failed/)
      // 10 in stock: 2 sold synchronously, 1 asynchronously; every compensated order gave its stock back
      assert.deepStrictEqual(
        lines.filter((l) => l.includes("stock of book")).map((l) => Number(l.split(": ").at(-1))),
        [10, 8, 8, 8, 8, 7]
      )
      assert.match(find(/events through the outbox/)!, /inventory\.release/)
    }))
})
