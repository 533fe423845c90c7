/**
 * Wake-ups for idle relays. Producers signal after their transaction commits. A signal goes to one
 * idle relay (the one idle longest), so that one commit costs one claim, not one per relay; a burst
 * of signals wakes one relay each. When no relay is idle, every relay keeps the signal in a
 * one-slot mailbox, so a signal that arrives while relays are busy is remembered (never dropped)
 * and many coalesce into one extra claim.
 *
 * Relays that compete for the same rows share a set of mailboxes (`subscribe`: the per-row
 * relays); readers that each need every event (log groups: a relay group, a consumer group) take a
 * set of their own (`subscribeTo`), and every signal goes to each set: one idle member, or all.
 * @since 0.1.0
 * @module
 */
import { Context, Effect, Metric, Queue, type Scope } from "effect"
import * as Metrics from "./Metrics.ts"

/**
 * Where a wake-up came from.
 * @since 0.1.0
 * @category models
 */
export type Source = "local" | "notify" | "poll"

/**
 * One relay's mailbox.
 * @since 0.1.0
 * @category models
 */
export interface Mailbox {
  /** Waits for a signal; while waiting, the relay counts as idle. */
  readonly take: Effect.Effect<Source>
  /** Drops remembered signals (the claim about to run answers them). */
  readonly clear: Effect.Effect<void>
}

/**
 * The wake-up hub of a process.
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /** Wakes one idle relay, or, when none is idle, leaves the signal with every relay. */
  readonly signal: (source: Source) => Effect.Effect<void>
  /** A mailbox for one relay of the shared set (per-row relays), removed when the scope closes. */
  readonly subscribe: Effect.Effect<Mailbox, never, Scope.Scope>
  /** A mailbox in the set `set`: every signal goes to every set (to one idle mailbox, or to all of it). */
  readonly subscribeTo: (set: string) => Effect.Effect<Mailbox, never, Scope.Scope>
  /** How many relays are waiting for a signal now. */
  readonly idle: Effect.Effect<number>
}

interface Entry {
  readonly queue: Queue.Queue<Source>
  idleSince: number | undefined
}

const make = (): Service => {
  const sets = new Map<string, Set<Entry>>()
  let clock = 0
  const deliver = (entries: Set<Entry>, source: Source) => {
    let pick: Entry | undefined
    for (const e of entries) {
      if (e.idleSince !== undefined && (pick === undefined || e.idleSince < pick.idleSince!)) pick = e
    }
    if (pick !== undefined) {
      pick.idleSince = undefined // the next signal goes to another idle relay
      Queue.offerUnsafe(pick.queue, source)
    } else {
      for (const e of entries) Queue.offerUnsafe(e.queue, source)
    }
  }
  const subscribeTo = (set: string) =>
    Effect.acquireRelease(
      Effect.map(Queue.sliding<Source>(1), (queue): Mailbox & { entry: Entry } => {
        const entry: Entry = { queue, idleSince: undefined }
        const entries = sets.get(set) ?? new Set<Entry>()
        sets.set(set, entries)
        entries.add(entry)
        return {
          entry,
          take: Effect.suspend(() => {
            entry.idleSince = ++clock
            return Queue.take(queue)
          }).pipe(Effect.ensuring(Effect.sync(() => void (entry.idleSince = undefined)))),
          clear: Effect.asVoid(Queue.clear(queue))
        }
      }),
      (m) =>
        Effect.sync(() => {
          const entries = sets.get(set)
          entries?.delete(m.entry)
          if (entries?.size === 0) sets.delete(set)
        })
    )
  return {
    signal: (source) =>
      Effect.suspend(() => {
        for (const entries of sets.values()) deliver(entries, source)
        return source === "poll" ? Effect.void : Metric.update(Metric.withAttributes(Metrics.wakeups, { source }), 1)
      }),
    subscribe: subscribeTo("relays"),
    subscribeTo,
    idle: Effect.sync(() => {
      let n = 0
      for (const entries of sets.values()) for (const e of entries) if (e.idleSince !== undefined) n++
      return n
    })
  }
}

/**
 * The process-wide hub: every relay in this process hears every producer in this process, which is
 * what "wake relays in the same process after commit" needs without any wiring.
 * @since 0.1.0
 * @category services
 */
export const Wakeups: Context.Reference<Service> = Context.Reference<Service>("@tidings/core/Wakeups", {
  defaultValue: make
})

/**
 * A fresh, private hub (tests that must not hear other tests' producers).
 * @since 0.1.0
 * @category constructors
 */
export const makeHub: () => Service = make
