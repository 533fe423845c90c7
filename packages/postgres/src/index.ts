/**
 * Tidings on Postgres: an effect/sql `SqlClient` on postgres.js, the Postgres outbox store,
 * LISTEN/NOTIFY wake-ups and the migrator.
 * @module
 */
export * as Migrator from "./Migrator.ts"
export * as PgClient from "./PgClient.ts"
export * as PgInboxStore from "./PgInboxStore.ts"
export * as PgLogConsumer from "./PgLogConsumer.ts"
export * as PgLogStore from "./PgLogStore.ts"
export * as PgOutboxStore from "./PgOutboxStore.ts"
export * as PgProjection from "./PgProjection.ts"
export * as PgSagaStore from "./PgSagaStore.ts"
export * as PgWakeup from "./PgWakeup.ts"
