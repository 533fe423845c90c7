/**
 * The Worker's settings, from its bindings (`wrangler.toml` vars and secrets, or the local config):
 *
 * | binding | default | meaning |
 * |---|---|---|
 * | `HYPERDRIVE` (Hyperdrive) or `DATABASE_URL` (secret) | required | the PostgreSQL database |
 * | `TIDINGS_SCHEMA` | `edge` | schema of Tidings' tables and the orders table |
 * | `WEBHOOK_URL`, `WEBHOOK_SECRET` (secret, `whsec_…`) | required by the cron trigger | where the relay pass delivers `order.*` events |
 * | `RELAY_MAX_EVENTS` | 1000 | events one relay pass claims at most |
 * | `RELAY_BUDGET_MS` | 20000 | a relay pass starts no batch after this long |
 */
import { Redacted, Schema } from "effect"

/** What the Worker receives as `env`. */
export interface Env {
  readonly HYPERDRIVE?: { readonly connectionString: string }
  readonly DATABASE_URL?: string
  readonly TIDINGS_SCHEMA?: string
  readonly WEBHOOK_URL?: string
  readonly WEBHOOK_SECRET?: string
  readonly RELAY_MAX_EVENTS?: string
  readonly RELAY_BUDGET_MS?: string
}

/** A binding that is missing or unusable. */
export class SettingsError extends Schema.TaggedError<SettingsError>()("SettingsError", {
  binding: Schema.String,
  message: Schema.String
}) {}

export interface Settings {
  readonly databaseUrl: Redacted.Redacted<string>
  readonly schema: string
  readonly webhook: { readonly url: string; readonly secret: Redacted.Redacted<string> } | undefined
  readonly maxEvents: number
  readonly budgetMs: number
}

const positive = (binding: string, raw: string | undefined, fallback: number): number => {
  if (raw === undefined || raw === "") return fallback
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1) {
    throw new SettingsError({ binding, message: `must be a positive integer, got ${JSON.stringify(raw)}` })
  }
  return n
}

/** Reads the bindings; throws {@link SettingsError}. */
export const fromEnv = (env: Env): Settings => {
  const url = env.HYPERDRIVE?.connectionString ?? env.DATABASE_URL
  if (url === undefined || url === "") {
    throw new SettingsError({ binding: "DATABASE_URL", message: "is not set (nor a HYPERDRIVE binding)" })
  }
  const schema = env.TIDINGS_SCHEMA ?? "edge"
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    throw new SettingsError({ binding: "TIDINGS_SCHEMA", message: "must be a lower-case SQL identifier" })
  }
  const webhook = env.WEBHOOK_URL === undefined || env.WEBHOOK_URL === ""
    ? undefined
    : { url: env.WEBHOOK_URL, secret: Redacted.make(env.WEBHOOK_SECRET ?? "") }
  return {
    databaseUrl: Redacted.make(url),
    schema,
    webhook,
    maxEvents: positive("RELAY_MAX_EVENTS", env.RELAY_MAX_EVENTS, 1000),
    budgetMs: positive("RELAY_BUDGET_MS", env.RELAY_BUDGET_MS, 20_000)
  }
}
