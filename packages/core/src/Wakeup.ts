/**
 * Wake-ups for idle relays. Producers signal after their transaction commits; each relay has a
 * one-slot mailbox, so a signal that arrives while the relay is busy is remembered (never dropped)
 * and many signals coalesce into one extra poll.
 * @module
 */
import { Context, Effect, Metric, Queue, type Scope } from "effect"
import * as Metrics from "./Metrics.ts"

/** Where a wake-up came from. */
export type Source = "local" | "notify" | "poll"

/** The wake-up hub of a process. */
export interface Service {
  /** Wakes every subscribed relay. */
  readonly signal: (source: Source) => Effect.Effect<void>
  /** A mailbox for one relay, removed when the scope closes. */
  readonly subscribe: Effect.Effect<Queue.Dequeue<Source>, never, Scope.Scope>
}

const make = (): Service => {
  const mailboxes = new Set<Queue.Queue<Source>>()
  return {
    signal: (source) =>
      Effect.suspend(() => {
        for (const mailbox of mailboxes) Queue.offerUnsafe(mailbox, source)
        return source === "poll" ? Effect.void : Metric.update(Metric.withAttributes(Metrics.wakeups, { source }), 1)
      }),
    subscribe: Effect.acquireRelease(
      Effect.tap(Queue.sliding<Source>(1), (q) => Effect.sync(() => mailboxes.add(q))),
      (q) => Effect.sync(() => mailboxes.delete(q))
    )
  }
}

/**
 * The process-wide hub: every relay in this process hears every producer in this process, which is
 * what "wake relays in the same process after commit" needs without any wiring.
 */
export const Wakeups: Context.Reference<Service> = Context.Reference<Service>("@tidings/core/Wakeups", { defaultValue: make })

/** A fresh, private hub (tests that must not hear other tests' producers). */
export const makeHub: () => Service = make
