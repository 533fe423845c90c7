/**
 * The relay contract: the relay's behaviour on a store, run against the memory store and the
 * Postgres store in this repository and against any third-party store (see
 * docs/writing-a-driver.md). Delivery (every committed event once, nothing rolled back, wake-ups,
 * backoff, dead letters, per-key order), eager dispatch, merged claims, shutdown within its
 * deadline, outages that count nothing, suspects, and `Relay.drain`. The publisher is a fresh
 * `MemoryBroker` per test.
 * @since 0.1.0
 * @module
 */
import { describe } from "@effect/vitest"
import type { Effect, Scope } from "effect"
import type { Service } from "../OutboxStore.ts"
import { type ContractOptions, timeOf } from "./OutboxStoreContract.ts"
import { claimTests } from "./relay/claims.ts"
import { deliveryTests } from "./relay/delivery.ts"
import { drainTests } from "./relay/drain.ts"
import { eagerTests } from "./relay/eager.ts"
import { outageTests } from "./relay/outages.ts"
import { shutdownTests } from "./relay/shutdown.ts"
import { makeSuite } from "./relay/suite.ts"

/**
 * Registers the relay contract for a store built fresh for each test (in the test's scope).
 * `clock: "test"` runs it on `TestClock` (a store whose time comes from `Clock`).
 * @since 0.1.0
 * @category contracts
 */
export const relayContract = (
  name: string,
  makeStore: Effect.Effect<Service, unknown, Scope.Scope>,
  options: ContractOptions = {}
): void => {
  const { test, time } = timeOf(options)
  const suite = makeSuite(makeStore, test, time)
  describe(`Relay contract: ${name}`, () => {
    deliveryTests(suite)
    eagerTests(suite)
    claimTests(suite)
    shutdownTests(suite)
    outageTests(suite)
    drainTests(suite)
  })
}
