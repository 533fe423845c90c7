/**
 * The README's table of environment variables is the one the code generates from the components'
 * settings schemas (`node scripts/configTable.ts` rewrites it), and names variables the code reads.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Settings from "@tidings/core/Settings"
import * as fs from "node:fs"
import { current, environments, readme, render } from "../scripts/configTable.ts"

describe("the README's configuration table", () => {
  it("matches the settings schemas (run node scripts/configTable.ts after changing one)", () => {
    const table = current(fs.readFileSync(readme, "utf8"))
    assert.isDefined(table, "README.md has the table's markers")
    assert.strictEqual(table, render())
  })

  it("lists every variable of every component once, the secrets among them", () => {
    const table = render()
    const names = new Set(
      environments.flatMap(([, env]) => Settings.variables(env.schema, env.prefix, env.names).map((v) => v.name))
    )
    for (const name of names) assert.include(table, `| \`${name}\` |`)
    assert.strictEqual(table.trim().split("\n").length - 2, names.size)
    for (const secret of ["TIDINGS_PG_URL", "TIDINGS_AMQP_URL", "TIDINGS_ADMIN_TOKEN"]) {
      assert.match(table, new RegExp(`\\| \`${secret}\` \\| [^|]+ \\| secret \\|`))
    }
  })
})
