import { InvalidConfig } from "@tidings/core/Errors"
import { Effect } from "effect"

// Schema names reach SQL as quoted identifiers (DDL cannot take parameters), so only plain,
// unquoted-safe names are accepted; anything else is rejected before any SQL is built.
const pattern = /^[a-z_][a-z0-9_]{0,62}$/

export const validateSchema = (schema: string): InvalidConfig | undefined =>
  pattern.test(schema) ? undefined : new InvalidConfig({
    path: "schema",
    message: `invalid schema name ${JSON.stringify(schema).slice(0, 80)}: use 1-63 characters of a-z, 0-9 and _, not starting with a digit`
  })

/** The configured schema (default `tidings`), validated: every store and the migrator start here. */
export const resolveSchema = (schema: string | undefined): Effect.Effect<string, InvalidConfig> => {
  const name = schema ?? "tidings"
  const invalid = validateSchema(name)
  return invalid === undefined ? Effect.succeed(name) : Effect.fail(invalid)
}
