/**
 * A saga's command event as it is sent: the step's draft with the saga headers, checked against its
 * event schema before anything is written.
 */
import { Clock, Effect, Option } from "effect"
import type { EventDraft } from "../Event.ts"
import * as Outbox from "../Outbox.ts"
import { CommandHeaders, type CommandKind } from "../SagaCommand.ts"
import type { Any } from "../SagaDefinition.ts"

/**
 * Builds command `kind` (attempt `attempt`) of step `index` from `make`; fails with why it cannot
 * be sent (`make` threw, or the event does not encode).
 * @since 0.1.0
 * @category constructors
 */
export const buildCommand = (
  sagaId: string,
  definition: Any,
  index: number,
  kind: CommandKind,
  attempt: number,
  make: () => EventDraft
): Effect.Effect<EventDraft, string> =>
  Effect.gen(function*() {
    let draft: EventDraft
    try {
      draft = make()
    } catch (e) {
      return yield* Effect.fail(`building the ${kind} command threw: ${String(e)}`)
    }
    const headers: Record<string, string> = {
      ...draft.headers,
      [CommandHeaders.sagaId]: sagaId,
      [CommandHeaders.sagaType]: definition.name,
      [CommandHeaders.step]: String(index),
      [CommandHeaders.stepName]: definition.steps[index]!.name,
      [CommandHeaders.kind]: kind,
      [CommandHeaders.attempt]: String(attempt)
    }
    const withHeaders: EventDraft = { ...draft, headers }
    yield* Outbox.encode(withHeaders, yield* Clock.currentTimeMillis, Option.none()).pipe(
      Effect.mapError((e) => e.message)
    )
    return withHeaders
  })
