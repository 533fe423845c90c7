// Eager dispatch: a relay registers a lane for the outbox store it serves; `Outbox.append` on the
// same store (the same service object, so the same table) writes its events already claimed for the
// lane and hands them over after the commit, so they are published without waiting for a claim.
import type { Effect } from "effect"
import type { AppendClaim, ClaimedEvent } from "../OutboxStore.ts"

export interface Lane {
  readonly claim: AppendClaim
  /** Whether `n` more events fit (soft: concurrent transactions may overshoot by their own events). */
  readonly hasRoom: (n: number) => boolean
  /** After the commit: queues the events, or, when the lane closed in between, gives them back to pending. */
  readonly deliver: (events: ReadonlyArray<ClaimedEvent>) => Effect.Effect<void>
}

// Keyed by the store service: a producer and a relay built from one store layer share it, and
// anything else (another schema, another client) falls back to claims.
const lanes = new WeakMap<object, Array<Lane>>()

export const register = (store: object, lane: Lane): void => {
  const list = lanes.get(store)
  if (list === undefined) lanes.set(store, [lane])
  else list.push(lane)
}

export const unregister = (store: object, lane: Lane): void => {
  const list = lanes.get(store)
  const at = list?.indexOf(lane) ?? -1
  if (at >= 0) list!.splice(at, 1)
}

/** A lane of `store` with room for `n` events (relay groups of one store take turns). */
export const lookup = (store: object, n: number): Lane | undefined => {
  const list = lanes.get(store)
  if (list === undefined) return undefined
  for (let i = 0; i < list.length; i++) {
    const lane = list[i]!
    if (lane.hasRoom(n)) {
      if (list.length > 1) list.push(...list.splice(0, i + 1))
      return lane
    }
  }
  return undefined
}
