/**
 * Command routes: decode the request, run the command handler in one transaction with the outbox
 * (the entity write and its events commit together, or neither does), answer with the result as
 * JSON. The body is bounded and must be JSON before it is parsed (see `Input.jsonBody`). The transaction is `OutboxStore.withTransaction`, the one `Outbox.append` joins: on Postgres
 * that is the app's `SqlClient` transaction, so any `sql` write inside the handler joins it too.
 * @module
 */
import { isRetryable, type StoreError } from "@tidings/core/Errors"
import * as Outbox from "@tidings/core/Outbox"
import type { OutboxStore } from "@tidings/core/OutboxStore"
import { Effect, type Schedule } from "effect"
import type { Context as HonoContext, Env, Handler, Input as HonoInput } from "hono"
import type * as HttpErrors from "./HttpErrors.ts"
import * as Input from "./Input.ts"
import type { Result, Runtime } from "./Runtime.ts"

/**
 * What a command handler is given.
 * @since 0.1.0
 * @category models
 */
export interface CommandInput<B, P, Q> {
  /** The decoded JSON body (`undefined` without a `body` schema). */
  readonly body: B
  /** The decoded path parameters (`undefined` without a `params` schema). */
  readonly params: P
  /** The decoded query (`undefined` without a `query` schema). */
  readonly query: Q
  /** The Hono context, for headers and the raw request. */
  readonly context: HonoContext
}

/**
 * Options of {@link handler}.
 * @since 0.1.0
 * @category options
 */
export interface Options<B, P, Q> {
  /** Schema of the JSON body; without one the body is not read. */
  readonly body?: Input.Decoder<B>
  /** Schema of the path parameters (a struct). */
  readonly params?: Input.Decoder<P>
  /** Schema of the query (a struct of strings). */
  readonly query?: Input.Decoder<Q>
  /** Largest JSON body in bytes (default: `Safety.middleware`'s, else 1 MiB); 413 beyond. */
  readonly bodyLimit?: number
  /** Status of the JSON result; default 200 (use 201 for a creation, 202 for accepted work). */
  readonly status?: number
  /** Status codes by error tag (e.g. `{ OutOfStock: 409 }`), on top of the runtime's. */
  readonly statuses?: HttpErrors.StatusMap
  /**
   * Retries the whole transaction on errors whose `isRetryable` is true (serialization failures,
   * deadlocks) along this schedule. Default: no retry. The handler must then be safe to run again,
   * which it is when all its effects are in the transaction.
   */
  readonly retry?: Schedule.Schedule<unknown, unknown>
}

type InputError = HttpErrors.BadRequest | HttpErrors.PayloadTooLarge | HttpErrors.UnsupportedMediaType

/**
 * Runs `effect` in one outbox transaction, retried along `retry` (when given) on retryable errors.
 * Use it in your own handlers when {@link handler} does not fit.
 * @since 0.1.0
 * @category combinators
 */
export const transaction = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  retry?: Schedule.Schedule<unknown, unknown>
): Effect.Effect<A, E | StoreError, R | OutboxStore> => {
  const once = Outbox.transaction(effect)
  return retry === undefined ? once : once.pipe(Effect.retry({ schedule: retry, while: isRetryable }))
}

/**
 * A Hono handler for a command: decodes `params`, `query` and the JSON `body` (400 with the issues
 * when they fail), runs `run` inside one outbox transaction and answers with its result as JSON
 * (a `Response` result is sent as is). Typed errors roll the transaction back and map to statuses
 * as in `HttpErrors`.
 * @since 0.1.0
 * @category combinators
 */
export const handler = <
  R,
  A extends Result,
  E,
  B = undefined,
  P = undefined,
  Q = undefined,
  V extends Env = any,
  Path extends string = any,
  I extends HonoInput = {}
>(
  runtime: Runtime<R | OutboxStore>,
  options: Options<B, P, Q>,
  run: (input: CommandInput<B, P, Q>) => Effect.Effect<A, E, R | OutboxStore>
): Handler<V, Path, I> =>
  runtime.handler<E | InputError | StoreError, Path, I, V>((c) =>
    Effect.gen(function*() {
      const context = c as unknown as HonoContext
      // Input is decoded before the transaction opens: a bad request costs no connection.
      const params = options.params === undefined ? undefined : yield* Input.params(context, options.params)
      const query = options.query === undefined ? undefined : yield* Input.query(context, options.query)
      const body = options.body === undefined
        ? undefined
        : yield* Input.json(
          context,
          options.body,
          options.bodyLimit === undefined ? {} : { bodyLimit: options.bodyLimit }
        )
      return yield* transaction(
        run({ body: body as B, params: params as P, query: query as Q, context }),
        options.retry
      )
    }) as Effect.Effect<Result, E | InputError | StoreError, R | OutboxStore>, {
    ...(options.status === undefined ? {} : { status: options.status }),
    ...(options.statuses === undefined ? {} : { statuses: options.statuses })
  })
