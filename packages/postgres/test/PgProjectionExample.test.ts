/**
 * The order list example (`node examples/orders-view/main.ts`) runs against the test server: the view
 * follows every write (read-your-writes), ignores the duplicate deliveries, and is rebuilt from the outbox.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { pgUrl } from "../../../test/support/pg.ts"
import { runExample } from "../../../test/support/processes.ts"

const script = path.join(import.meta.dirname, "../../../examples/orders-view/main.ts")

describe("examples/orders-view", () => {
  it.live("keeps the order list up to date, exactly once, and rebuilds it", () =>
    Effect.gen(function*() {
      const { code, output } = yield* Effect.promise(() => runExample(script, { TIDINGS_PG_URL: pgUrl() }))
      assert.strictEqual(code, 0, output)
      const lines = output.split("\n").filter((l) => l.startsWith("[orders-view]")).map((l) =>
        l.slice("[orders-view] ".length)
      )
      // Read-your-writes: each query waited for the write just made.
      assert.deepStrictEqual(lines.filter((l) => l.startsWith("alice:")), [
        "alice: 01 shipped via DHL 42.00 | 02 placed 19.99",
        "alice: 01 shipped via DHL 42.00 | 02 paid 19.99",
        "alice: 01 shipped via DHL 42.00 | 02 cancelled (changed her mind) 19.99",
        "alice: 01 shipped via DHL 42.00 | 02 cancelled (changed her mind) 19.99"
      ])
      assert.deepStrictEqual(lines.filter((l) => l.startsWith("bob:")), [
        "bob: 03 cancelled (out of stock) 150.00",
        "bob: 03 cancelled (out of stock) 150.00"
      ])
      // 8 events, each delivered twice: applied once each, the copies ignored.
      assert.match(lines.find((l) => l.startsWith("deliveries:")) ?? "", /^deliveries: 8 applied, 8 duplicates ignored/)
      assert.match(lines.find((l) => l.startsWith("damaged alice:")) ?? "", /garbled/)
      assert.match(
        lines.find((l) => l.startsWith("rebuilt from the outbox:")) ?? "",
        /^rebuilt from the outbox: \d+ events, \d+ orders$/
      )
    }))
})
