/**
 * Eager dispatch: the link between `Outbox.append` and a relay running in the same process on the
 * same store. A relay registers a lane here; an append on that store writes its events already
 * claimed for the lane and hands them over after the commit, so they are published without waiting
 * for a claim.
 *
 * The registry is a `Context.Reference` provided next to the store by the store's layer
 * (`MemoryOutboxStore.layer`, `PgOutboxStore.layer`), so that a producer and a relay built from one
 * store layer share it. Without it (the default) there is no eager dispatch: every event is claimed.
 * An app that provides a store as a value (`Layer.succeed(OutboxStore, store)`) adds
 * {@link layer} beside it to get eager dispatch.
 * @since 0.1.0
 * @module
 */
import { Context, type Effect, Layer } from "effect"
import type { AppendClaim, ClaimedEvent, Service as Store } from "./OutboxStore.ts"

/**
 * A relay's eager-dispatch lane.
 * @since 0.1.0
 * @category models
 */
export interface Lane {
  /** The store the lane serves: appends on any other store are not handed to it. */
  readonly store: Store
  /** How its events are written (claimed for the lane's relay id, with a lease). */
  readonly claim: AppendClaim
  /** Whether `n` more events fit (soft: concurrent transactions may overshoot by their own events). */
  readonly hasRoom: (n: number) => boolean
  /** After the commit: queues the events, or, when the lane closed in between, gives them back to pending. */
  readonly deliver: (events: ReadonlyArray<ClaimedEvent>) => Effect.Effect<void>
}

/**
 * The lanes of the relays of one store layer.
 * @since 0.1.0
 * @category models
 */
export interface Registry {
  /** False for the default registry: relays then run without an eager lane. */
  readonly enabled: boolean
  /** Adds a lane; the returned effect removes it. */
  readonly register: (lane: Lane) => () => void
  /** A lane of `store` with room for `n` events (relay groups of one store take turns). */
  readonly lookup: (store: Store, n: number) => Lane | undefined
}

/**
 * A fresh registry.
 * @since 0.1.0
 * @category constructors
 */
export const make = (): Registry => {
  const lanes: Array<Lane> = []
  return {
    enabled: true,
    register: (lane) => {
      lanes.push(lane)
      return () => {
        const at = lanes.indexOf(lane)
        if (at >= 0) lanes.splice(at, 1)
      }
    },
    lookup: (store, n) => {
      for (let i = 0; i < lanes.length; i++) {
        const lane = lanes[i]!
        if (lane.store === store && lane.hasRoom(n)) {
          // Round robin: the next append tries the next relay group first.
          if (lanes.length > 1) lanes.push(...lanes.splice(0, i + 1))
          return lane
        }
      }
      return undefined
    }
  }
}

/**
 * No eager dispatch: nothing registers, nothing is found.
 * @since 0.1.0
 * @category constructors
 */
export const disabled: Registry = { enabled: false, register: () => () => {}, lookup: () => undefined }

/**
 * The registry in use: provided by store layers; {@link disabled} by default.
 * @since 0.1.0
 * @category services
 */
export const Lanes: Context.Reference<Registry> = Context.Reference<Registry>("@tidings/core/EagerDispatch", {
  defaultValue: () => disabled
})

/**
 * A fresh registry, for a store provided as a value (store layers include one).
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<never> = Layer.sync(Lanes, make)
