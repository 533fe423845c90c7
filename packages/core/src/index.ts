/**
 * Tidings core: the message model, the transactional outbox, the relay engine, the storage and
 * publishing ports with in-memory implementations, retry schedules and metrics.
 * @module
 */
export * as EagerDispatch from "./EagerDispatch.ts"
export * as Errors from "./Errors.ts"
export * as Event from "./Event.ts"
export * as Health from "./Health.ts"
export * as MemoryBroker from "./MemoryBroker.ts"
export * as MemoryOutboxStore from "./MemoryOutboxStore.ts"
export * as Message from "./Message.ts"
export * as Metrics from "./Metrics.ts"
export * as Outbox from "./Outbox.ts"
export * as OutboxStore from "./OutboxStore.ts"
export * as Publisher from "./Publisher.ts"
export * as Relay from "./Relay.ts"
export * as Retry from "./Retry.ts"
export * as Settings from "./Settings.ts"
export * as Tracing from "./Tracing.ts"
export * as Wakeup from "./Wakeup.ts"
export * as Saga from "./Saga.ts"
export * as SagaStore from "./SagaStore.ts"
export * as Inbox from "./Inbox.ts"
export * as InboxStore from "./InboxStore.ts"
export * as Projection from "./Projection.ts"
