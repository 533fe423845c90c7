/**
 * Span names of the saga engine (re-exported as `Saga.spanNames`): each is followed by what it is
 * about, `saga.run <saga type>`, `saga.step <step name>`, `saga.compensate <step name>`,
 * `saga.start <saga type>`, `saga.recover <saga type>`; `saga.reply` handles a reply (inside the
 * consumer's `process` span), its `saga.step <step name>` records the step's outcome. The messages
 * a saga sends get the outbox's own spans (`create <command type>`, `send ...`).
 * @since 0.1.0
 * @category constants
 */
export const spanNames = {
  run: "saga.run",
  step: "saga.step",
  compensate: "saga.compensate",
  start: "saga.start",
  reply: "saga.reply",
  recover: "saga.recover"
} as const

/** `saga.step reserve` */
export const spanName = (kind: keyof typeof spanNames, subject: string): string => `${spanNames[kind]} ${subject}`
