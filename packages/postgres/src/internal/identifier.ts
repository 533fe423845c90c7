import { InvalidConfig } from "@tidings/core/Errors"
import { Effect } from "effect"

/**
 * The longest name a schema's derived identifiers leave room for: the NOTIFY channel
 * `tidings_outbox_<schema>` (15 + 48 = 63 bytes, PostgreSQL's limit; longer channel names fail every
 * NOTIFY). Table, index and constraint names inside the schema do not depend on its name.
 */
export const maxSchemaLength = 48

// Schema names reach SQL as quoted identifiers (DDL cannot take parameters), so only plain,
// unquoted-safe names are accepted; anything else is rejected before any SQL is built.
const pattern = new RegExp(`^[a-z_][a-z0-9_]{0,${maxSchemaLength - 1}}$`)

export const validateSchema = (schema: string): InvalidConfig | undefined =>
  typeof schema === "string" && pattern.test(schema) ? undefined : new InvalidConfig({
    path: "schema",
    message:
      `invalid schema name ${
        JSON.stringify(schema)?.slice(0, 80)
      }: use 1-${maxSchemaLength} characters of a-z, 0-9 and _, ` +
      `not starting with a digit (longer names would make the NOTIFY channel tidings_outbox_<schema> exceed 63 bytes)`
  })

/** The configured schema (default `tidings`), validated: every store and the migrator start here. */
export const resolveSchema = (schema: string | undefined): Effect.Effect<string, InvalidConfig> => {
  const name = schema ?? "tidings"
  const invalid = validateSchema(name)
  return invalid === undefined ? Effect.succeed(name) : Effect.fail(invalid)
}
