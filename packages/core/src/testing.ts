/**
 * `@tidings/core/testing`: the contract suites a driver (a store, a publisher, a consumer transport)
 * passes (the ones this repository runs against its own drivers), and helpers for tests of code
 * built on Tidings. They register tests with `@effect/vitest` (an optional peer dependency); the
 * main entry never imports this module. See docs/writing-a-driver.md.
 * @since 0.1.0
 * @module
 */
export * from "./testing/ConsumerContract.ts"
export * from "./testing/helpers.ts"
export * from "./testing/InboxContract.ts"
export * from "./testing/LogConsumerContract.ts"
export * from "./testing/LogRelayContract.ts"
export * from "./testing/OutboxStoreContract.ts"
export * from "./testing/PublisherContract.ts"
export * from "./testing/RelayContract.ts"
export * from "./testing/SagaStoreContract.ts"
