/**
 * Contract suites a third-party driver (a store, a consumer transport) runs against itself, and test
 * helpers. Needs `@effect/vitest` and `vitest` (optional peer dependencies); the main entry of
 * `@tidings/core` never imports this module.
 * @since 0.1.0
 * @module
 */
export * from "./testing/ConsumerContract.ts"
export * from "./testing/InboxContract.ts"
export * from "./testing/SagaStoreContract.ts"
export * from "./testing/LogConsumerContract.ts"
export * from "./testing/LogRelayContract.ts"
