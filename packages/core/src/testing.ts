/**
 * Contract suites and helpers for testing Tidings drivers (`@tidings/core/testing`): run the same
 * tests against your own store as the built-in stores pass. Needs `vitest` and `@effect/vitest`
 * (optional peer dependencies); the main entry of `@tidings/core` never imports this module.
 * @since 0.1.0
 * @module
 */
export * from "./testing/SagaStoreContract.ts"
export * from "./testing/LogConsumerContract.ts"
export * from "./testing/LogRelayContract.ts"
