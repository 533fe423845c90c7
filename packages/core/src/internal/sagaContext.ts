/**
 * What the engine derives from a definition: the context each step is given, and which engine a
 * definition needs.
 */
import type { Any, StepContext } from "../SagaDefinition.ts"

/**
 * The context of step `index`: the input and the results of the steps before it.
 * @since 0.1.0
 * @category constructors
 */
export const contextOf = (
  definition: Any,
  sagaId: string,
  input: unknown,
  results: Record<string, unknown>,
  index: number
): StepContext<any, any> => {
  const name = definition.steps[index]!.name
  const before: Record<string, unknown> = {}
  for (let i = 0; i < index; i++) {
    const n = definition.steps[i]!.name
    if (n in results) before[n] = results[n]
  }
  return {
    sagaId,
    sagaType: definition.name,
    input,
    results: before,
    step: name,
    index,
    idempotencyKey: `${sagaId}/${name}`
  }
}

/**
 * Which steps a definition holds: only local ones (for `Saga.run`), only commands (for
 * `Saga.start`), both (usable by neither), or none.
 * @since 0.1.0
 * @category accessors
 */
export const kindOf = (definition: Any): "local" | "command" | "mixed" | "empty" => {
  const local = definition.steps.some((s) => s._tag === "Local")
  const command = definition.steps.some((s) => s._tag === "Command")
  return local && command ? "mixed" : local ? "local" : command ? "command" : "empty"
}
