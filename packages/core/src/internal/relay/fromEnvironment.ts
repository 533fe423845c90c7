/**
 * Relay settings from the environment: the variables of `Relay.ConfigSchema` under a prefix
 * (`TIDINGS_RELAY_CONCURRENCY`, `TIDINGS_RELAY_LEASE`, `TIDINGS_RELAY_POLL_INTERVAL_MAX`, ...), on
 * top of the options given in code, checked by the same rules as object config (the cross-field
 * ones too), every problem named by its variable.
 * @internal
 */
import { Effect } from "effect"
import type { InvalidConfig } from "../../Errors.ts"
import * as Settings from "../../Settings.ts"
import { type Config, ConfigSchema, settings } from "./settings.ts"

/** The relay's variables: `TIDINGS_RELAY_*`. */
export const environment: Settings.Environment<typeof ConfigSchema> = {
  component: "Relay",
  schema: ConfigSchema,
  prefix: "TIDINGS_RELAY"
}

/**
 * The relay's options from the environment (`TIDINGS_RELAY_*`, or `options.prefix`), on top of
 * `options.defaults` (which also carries what has no variable, such as `retry`).
 */
export const config = (options: Settings.EnvironmentOptions<Config> = {}): Effect.Effect<Config, InvalidConfig> =>
  Effect.gen(function*() {
    const relayConfig: Config = yield* Settings.read(environment, options)
    yield* Effect.mapError(
      settings(relayConfig),
      Settings.inEnvironment(ConfigSchema, options.prefix ?? environment.prefix)
    )
    return relayConfig
  })
