/**
 * Who runs: producers (the first with a relay inside, on eager dispatch; the second appending only,
 * with `NOTIFY` waking the relays elsewhere), relay processes and consumer processes, with the
 * environment each needs.
 * @module
 */
import * as path from "node:path"
import type { WorkerSpec } from "./fleet.ts"
import type { Options } from "./options.ts"

const script = (name: string) => path.join(import.meta.dirname, "workers", `${name}.ts`)

/** The workers of a run against the given servers. */
export const make = (options: Options, pgUrl: string, amqpUrl: string): Array<WorkerSpec> => {
  const common = { CHAOS_PG_URL: pgUrl, CHAOS_AMQP_URL: amqpUrl, CHAOS_LEASE_SECONDS: String(options.leaseSeconds) }
  const specs: Array<WorkerSpec> = []
  for (let i = 1; i <= options.producers; i++) {
    specs.push({
      name: `producer-${i}`,
      role: "producer",
      script: script("producer"),
      env: {
        ...common,
        CHAOS_RATE: String(options.rate / options.producers),
        CHAOS_ROLLBACK: String(options.rollbackRatio),
        CHAOS_SEED: String((options.seed + i * 7919) >>> 0),
        CHAOS_EAGER_RELAY: i === 1 ? "1" : "0"
      }
    })
  }
  for (let i = 1; i <= options.relays; i++) {
    specs.push({ name: `relay-${i}`, role: "relay", script: script("relay"), env: common })
  }
  for (let i = 1; i <= options.consumers; i++) {
    specs.push({ name: `consumer-${i}`, role: "consumer", script: script("consumer"), env: common })
  }
  return specs
}
