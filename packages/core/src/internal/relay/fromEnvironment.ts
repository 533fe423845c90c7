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

/** Where {@link config} reads, and what code sets (the variables that are set win). */
export interface EnvironmentOptions {
  /** Default `TIDINGS_RELAY`. */
  readonly prefix?: string
  /** Options set in code: the defaults of the variables, and what has no variable (`retry`). */
  readonly defaults?: Config
}

/** The relay's options from the environment (see {@link EnvironmentOptions}). */
export const config = (options: EnvironmentOptions = {}): Effect.Effect<Config, InvalidConfig> => {
  const prefix = options.prefix ?? "TIDINGS_RELAY"
  return Effect.gen(function*() {
    const decoded = yield* Settings.fromConfig(ConfigSchema, prefix, options.defaults === undefined ? {} : { defaults: options.defaults })
    // Optional options left out are absent, not `undefined` (the relay's Config is exact).
    const relayConfig = Object.fromEntries(Object.entries(decoded).filter(([, v]) => v !== undefined)) as Config
    yield* Effect.mapError(settings(relayConfig), Settings.inEnvironment(ConfigSchema, prefix))
    return relayConfig
  })
}
