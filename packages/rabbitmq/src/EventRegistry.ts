/**
 * Moved to core: `@tidings/core/EventRegistry` (so that in-memory consumers decode the same way).
 * Re-exported here for code written against `@tidings/rabbitmq`.
 * @since 0.1.0
 * @module
 */
export * from "@tidings/core/EventRegistry"
