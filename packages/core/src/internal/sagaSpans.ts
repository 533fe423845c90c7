/**
 * Span names of the saga engine (re-exported as `Saga.spanNames`).
 * @since 0.1.0
 * @category constants
 */
export const spanNames = {
  run: "tidings.saga.run",
  step: "tidings.saga.step",
  compensate: "tidings.saga.compensate",
  start: "tidings.saga.start",
  reply: "tidings.saga.reply",
  recover: "tidings.saga.recover"
} as const
