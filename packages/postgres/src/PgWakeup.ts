/**
 * Cross-process wake-ups: LISTEN on the outbox channel and wake this process's relays when another
 * process appends (with `PgOutboxStore` option `notify: true`). Relays in the appending process are
 * woken after commit without it. A notification is only a hint: if one is lost (connection drop),
 * the relay's polling still finds the events.
 * @since 0.1.0
 * @module
 */
import * as Retry from "@tidings/core/Retry"
import { Wakeups } from "@tidings/core/Wakeup"
import { Effect, Layer, Stream } from "effect"
import { instanceId } from "./internal/instance.ts"
import { PgClient } from "./PgClient.ts"
import { channel } from "./PgOutboxStore.ts"

/**
 * Options of {@link layer}.
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The outbox schema whose appends to listen for; default `tidings`. */
  readonly schema?: string
  /**
   * Ignore notifications sent by this process's own stores (default true): its relays were already
   * woken after the commit, and a second wake-up would only cost an empty claim.
   */
  readonly ignoreOwn?: boolean
}

/**
 * Listens while the layer is alive; reconnects with backoff if the listening connection fails.
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<never, never, PgClient> =>
  Layer.effectDiscard(Effect.gen(function*() {
    const pg = yield* PgClient
    const wakeups = yield* Wakeups
    const ignoreOwn = options.ignoreOwn ?? true
    yield* pg.listen(channel(options.schema ?? "tidings")).pipe(
      // Our own appends already woke this process's relays after their commit.
      Stream.runForEach((payload) => ignoreOwn && payload === instanceId() ? Effect.void : wakeups.signal("notify")),
      Effect.tapError((e) => Effect.logWarning("outbox LISTEN failed; retrying", e)),
      Effect.retry(Retry.exponentialBackoff({ base: "100 millis", max: "10 seconds" })),
      Effect.forkScoped
    )
  }))
