/**
 * A step not started yet, as a new saga holds it (the engine's local runs and the memory store).
 * @since 0.1.0
 * @category constructors
 */
export const pendingStep = (index: number, name: string) => ({
  index,
  name,
  status: "pending" as const,
  result: null,
  error: null,
  attempts: 0,
  compensationAttempts: 0,
  startedAt: null,
  finishedAt: null
})
