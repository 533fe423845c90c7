import { Deferred, Effect, Exit } from "effect"
import type * as LogStore from "../LogStore.ts"
import { fromState, type Held, single, suspect } from "./logPlan.ts"

/**
 * Which partitions a member is assigned: the live members, sorted, take partitions round-robin
 * (partition p goes to member p mod n). Every member computes the same answer from the same list.
 */
export const assign = (members: ReadonlyArray<string>, member: string, partitions: number): Set<number> => {
  const i = members.indexOf(member)
  const out = new Set<number>()
  if (i < 0) return out
  for (let p = i; p < partitions; p += members.length) out.add(p)
  return out
}

/**
 * The partitions an instance holds, shared by its lease loop and its workers. Workers take ready
 * partitions (held, idle, due, the lease safely valid) and give them back after settling; the lease
 * loop adds, drops and marks partitions for release, and wakes workers on every change.
 */
export class Ownership {
  readonly held = new Map<number, Held>()
  /** Local time (ms) until which the last renewal holds every lease, minus the work margin. */
  deadline = 0
  #changed = Deferred.makeUnsafe<void>()
  #offset = 0

  /** Completes at the next change of the held partitions. */
  get changed(): Effect.Effect<void> {
    return Deferred.await(this.#changed)
  }

  signal(): void {
    Deferred.doneUnsafe(this.#changed, Exit.void)
    this.#changed = Deferred.makeUnsafe<void>()
  }

  add(state: LogStore.PartitionState, now: number): void {
    this.held.set(state.partition, fromState(state, now))
  }

  drop(partition: number): void {
    this.held.delete(partition)
  }

  /**
   * Leases of the held partitions, those marked for release included: one still busy must keep its
   * lease until its batch is settled and it is released.
   */
  leases(): Array<LogStore.Lease> {
    return [...this.held.values()].map((h) => ({ partition: h.partition, epoch: h.epoch }))
  }

  /**
   * Marks busy and returns up to `max` partitions a worker may read now, fairly rotated. A suspect
   * partition (its previous owner died with a batch in flight) goes alone, and only one at a time in
   * this instance: when the next death comes, the event in flight alone is the one that caused it,
   * and no innocent head of another suspect partition is charged a crash.
   */
  take(now: number, max: number): Array<Held> {
    if (now >= this.deadline) return []
    const all = [...this.held.values()]
    const ready = (h: Held) => !h.busy && !h.releasing && h.retryAt <= now
    if (!all.some((h) => h.busy && suspect(h))) {
      const alone = all.find((h) => ready(h) && suspect(h))
      if (alone !== undefined) {
        alone.busy = true
        return [alone]
      }
    }
    const out: Array<Held> = []
    // Partitions with events first: a worker that took only drained ones would find nothing and
    // sleep while others wait with a backlog. Drained ones fill what is left of the share.
    for (const drained of [false, true]) {
      for (let k = 0; k < all.length && out.length < max; k++) {
        const h = all[(this.#offset + k) % all.length]!
        if (h.drained !== drained || !ready(h) || suspect(h)) continue
        h.busy = true
        out.push(h)
      }
    }
    this.#offset = all.length === 0 ? 0 : (this.#offset + out.length) % all.length
    return out
  }

  /** True when a partition that is ready and not known to be drained waits for a worker. */
  hasUndrained(now: number): boolean {
    if (now >= this.deadline) return false
    for (const h of this.held.values()) {
      if (!h.busy && !h.releasing && !h.drained && h.retryAt <= now && !suspect(h)) return true
    }
    return false
  }

  /** Forgets which partitions were found drained: after a wake-up or a poll, every one is looked at again. */
  undrain(): void {
    for (const h of this.held.values()) h.drained = false
  }

  /** When a held idle partition becomes due (its head's retry), if any is waiting. */
  nextDue(now: number): number | undefined {
    let next: number | undefined
    for (const h of this.held.values()) {
      if (h.busy || h.releasing || h.retryAt <= now) continue
      if (next === undefined || h.retryAt < next) next = h.retryAt
    }
    return next
  }

  /** Partitions marked for release that no worker holds: to release now. */
  releasable(): Array<Held> {
    return [...this.held.values()].filter((h) => h.releasing && !h.busy)
  }
}

/** The read request for a held partition: its head alone when it is retrying or suspect. */
export const request = (h: Held, batchSize: number): LogStore.ReadRequest => ({
  partition: h.partition,
  epoch: h.epoch,
  after: h.cursor,
  limit: single(h) ? 1 : batchSize
})
