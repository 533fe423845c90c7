/**
 * How sagas are persisted: inputs and step results are stored as the JSON their schemas encode
 * them to, and decoded with the definition's schemas when a saga is read back.
 */
import { Effect, Schema } from "effect"
import type { Any } from "../SagaDefinition.ts"
import type { Execution, StepStatus } from "../SagaStore.ts"

type AnyCodec = Schema.Codec<any, any, never, never>

/**
 * Encodes a value with its schema into JSON (`undefined` → `null`); fails with why not.
 * @since 0.1.0
 * @category encoding
 */
export const encodeJson = (schema: AnyCodec, value: unknown): Effect.Effect<unknown, string> =>
  Schema.encodeUnknownEffect(schema)(value).pipe(
    Effect.mapError((e) => e.message),
    Effect.flatMap((encoded) => {
      if (encoded === undefined) return Effect.succeed(null)
      try {
        const json = JSON.stringify(encoded)
        return json === undefined ? Effect.fail("encodes to nothing") : Effect.succeed(JSON.parse(json) as unknown)
      } catch (e) {
        return Effect.fail(`not JSON-serializable: ${String(e)}`)
      }
    })
  )

/**
 * Decodes stored JSON with its schema (a stored `null` may stand for `undefined`, e.g. `Schema.Void`).
 * @since 0.1.0
 * @category decoding
 */
export const decodeJson = (schema: AnyCodec, json: unknown): Effect.Effect<unknown, string> =>
  Schema.decodeUnknownEffect(schema)(json).pipe(
    Effect.catch((e) => json === null ? Schema.decodeUnknownEffect(schema)(undefined) : Effect.fail(e)),
    Effect.mapError((e) => e.message)
  )

const hasResult = (status: StepStatus) =>
  status === "completed" || status === "compensated" || status === "compensation_failed"

/**
 * A stored execution's input and results, decoded.
 * @since 0.1.0
 * @category models
 */
export interface Decoded {
  readonly input: unknown
  /** Decoded results by step name. */
  readonly results: Record<string, unknown>
}

/**
 * Decodes a stored execution's input and results with the definition's schemas; fails with what
 * does not decode.
 * @since 0.1.0
 * @category decoding
 */
export const decodeExecution = (definition: Any, execution: Execution): Effect.Effect<Decoded, string> =>
  Effect.gen(function*() {
    const input = yield* decodeJson(definition.input, execution.saga.input).pipe(Effect.mapError((e) => `input: ${e}`))
    const results: Record<string, unknown> = {}
    for (const record of execution.steps) {
      const step = definition.steps[record.index]
      if (step === undefined || !hasResult(record.status)) continue
      results[step.name] = yield* decodeJson(step.result, record.result).pipe(
        Effect.mapError((e) => `result of ${step.name}: ${e}`)
      )
    }
    return { input, results }
  })
