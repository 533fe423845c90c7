import { Clock, Deferred, Duration, Effect, Fiber, Metric, Option, type Scope } from "effect"
import { isUnavailable, type StoreError } from "../Errors.ts"
import * as LogStore from "../LogStore.ts"
import * as Metrics from "../Metrics.ts"
import { Wakeups } from "../Wakeup.ts"
import { assign, Ownership, request } from "./logOwnership.ts"
import { apply, crashLoop, type Held, type Plan, type PlanSettings } from "./logPlan.ts"
import * as LogSpans from "./logSpans.ts"

/** What the group runner needs to know (relays and consumers derive it from their own settings). */
export interface GroupSettings extends PlanSettings {
  readonly group: string
  readonly member: string
  readonly concurrency: number
  readonly batchSize: number
  readonly lease: Duration.Duration
  /** A worker only starts a batch while the last renewal holds the leases for at least this long (the work's own timeout, at most a quarter of the lease, so that a renewal late by a little does not stall the workers). */
  readonly margin: Duration.Duration
  readonly pollMin: Duration.Duration
  readonly pollBase: Duration.Duration
  readonly pollMax: Duration.Duration
  readonly startFrom: "earliest" | "latest"
  readonly shutdownTimeout: Duration.Duration
}

/** One partition's events, in order, with the partition's state. */
export interface Batch {
  readonly held: Held
  readonly events: ReadonlyArray<LogStore.LogEvent>
}

/** What processing a read did: a plan per batch, and the states the store returned for the settled ones. */
export interface Processed {
  readonly plans: ReadonlyArray<Plan>
  readonly states: ReadonlyArray<LogStore.PartitionState>
}

/**
 * Does the work for the batches of one read and settles them (a relay publishes then settles; a
 * consumer runs its handlers and settles in their transaction). Only `restore`d parts may be
 * interrupted; an interruption leaves the batches unsettled (their next owner does them again).
 */
export type Processor = (
  restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>,
  batches: ReadonlyArray<Batch>
) => Effect.Effect<Processed, StoreError>

/** A running group member. */
export interface Running {
  readonly ownership: Ownership
  readonly isRunning: Effect.Effect<boolean>
  /**
   * True while an outage (the publisher or the database unavailable) holds the work back: a batch
   * stopped for it and none has been done since.
   */
  readonly isPaused: Effect.Effect<boolean>
  /** Completes when the workers have stopped (the layer is closing). */
  readonly stopped: Effect.Effect<void>
}

const min = (a: Duration.Duration, b: Duration.Duration) => (Duration.isLessThan(a, b) ? a : b)

/**
 * Runs a member of a log group in the current scope: a lease loop (join, rebalance, renew) and
 * `concurrency` workers reading the partitions it holds. `awaitResumable` is waited on after a batch
 * stopped for an outage (the publisher's `awaitAvailable`, or a pause). Closing the scope stops the
 * workers (in-flight batches finish within `shutdownTimeout`, else they are interrupted), releases
 * the leases and leaves the group.
 */
export const run = (
  s: GroupSettings,
  processor: Processor,
  awaitResumable: Effect.Effect<void>
): Effect.Effect<Running, never, LogStore.LogStore | Scope.Scope> =>
  Effect.gen(function*() {
    const store = yield* LogStore.LogStore
    const wakeups = yield* Wakeups
    const own = new Ownership()
    const stop = yield* Deferred.make<void>()
    const attrs = { group: s.group }
    let running = 0
    let outage = false
    // Workers in a batch, and whether the last read found a backlog (a partition filled its batch).
    let reading = 0
    let backlog = false
    // Wake-ups any worker of this member took, and when the last one came.
    let wakes = 0
    let wokenAt = Number.NEGATIVE_INFINITY
    const leaseMs = Duration.toMillis(s.lease)
    const marginMs = Duration.toMillis(s.margin)

    const releaseNow = (hs: ReadonlyArray<Held>) =>
      hs.length === 0 ?
        Effect.void :
        store.release(s.group, s.member, hs.map((h) => ({ partition: h.partition, epoch: h.epoch }))).pipe(
          Effect.tap(() =>
            Effect.sync(() => {
              for (const h of hs) own.drop(h.partition)
            })
          ),
          Effect.andThen(
            Metric.update(Metric.withAttributes(Metrics.log.rebalances, { ...attrs, change: "released" }), hs.length)
          ),
          Effect.catch((e) => Effect.logWarning("log group: releasing leases failed; they will expire", e))
        )

    // The lease loop: join (renew membership), compute this member's share, release what is no longer
    // ours, renew the rest, acquire what is ours and free. A partition that is ours but still held by
    // a member that has not noticed the change yet is tried again soon, not a heartbeat later.
    const tick = Effect.gen(function*() {
      const t0 = yield* Clock.currentTimeMillis
      const members = yield* store.join({ group: s.group, member: s.member, lease: s.lease, startFrom: s.startFrom })
      const mine = assign(members, s.member, store.partitions)
      let changed = false
      for (const h of own.held.values()) {
        if (!mine.has(h.partition) && !h.releasing) {
          h.releasing = true
          changed = true
        }
      }
      yield* releaseNow(own.releasable())
      const leases = own.leases()
      const still = new Set(yield* store.renew(s.group, s.member, leases, s.lease))
      for (const l of leases) {
        if (!still.has(l.partition) && !own.held.get(l.partition)?.busy) {
          own.drop(l.partition)
          changed = true
          yield* Metric.update(Metric.withAttributes(Metrics.log.rebalances, { ...attrs, change: "lost" }), 1)
        }
      }
      own.deadline = t0 + leaseMs - marginMs
      const wanted = [...mine].filter((p) => !own.held.has(p))
      if (wanted.length > 0) {
        const now = yield* Clock.currentTimeMillis
        const got = yield* store.acquire(s.group, s.member, wanted, s.lease)
        for (const state of got) {
          own.add(state, now)
          if (state.crashes > 0 && state.suspectUntil !== null) {
            yield* Metric.update(Metric.withAttributes(Metrics.log.crashes, attrs), 1)
          }
        }
        if (got.length > 0) {
          changed = true
          yield* Metric.update(
            Metric.withAttributes(Metrics.log.rebalances, { ...attrs, change: "acquired" }),
            got.length
          )
        }
      }
      yield* Metric.update(Metric.withAttributes(Metrics.log.partitions, attrs), own.held.size)
      if (changed) {
        own.signal()
      }
      const pending = [...mine].some((p) => !own.held.has(p)) || [...own.held.values()].some((h) => h.releasing)
      return { state: pending ? "waiting" as const : "settled" as const, changed }
    })
    const heartbeat = Duration.millis(Math.max(10, leaseMs / 3))
    const quick = Duration.millis(Math.max(10, leaseMs / 12))
    const leaseLoop = Effect.gen(function*() {
      while (true) {
        // Traced only when the round changed what this member holds (or failed): heartbeats are quiet.
        const r = yield* tick.pipe(
          LogSpans.lease(s.group),
          Effect.map((round) => round.state),
          Effect.catchCause((cause) =>
            Effect.as(Effect.logWarning("log group: lease round failed; retrying", cause), "failed" as const)
          )
        )
        // While partitions of ours are still held elsewhere (or the database is away), look again soon.
        const pause = r === "settled" ? heartbeat : quick
        yield* Effect.sleep(Duration.millis(Duration.toMillis(pause) * (0.8 + Math.random() * 0.4)))
      }
    })

    const settleOnly = (plans: ReadonlyArray<Plan>) =>
      plans.length === 0 ? Effect.succeed([]) : store.settle(s.group, s.member, plans.map((p) => p.settlement))

    const worker = Effect.gen(function*() {
      // A set per member (its workers read the same partitions): every group, and every member of a
      // group, hears every commit (an idle worker elsewhere taking the signal would leave this
      // member's partitions to its poll).
      const mailbox = yield* wakeups.subscribeTo(`log:${s.group}:${s.member}`)
      running++
      let delay = s.pollBase
      let heldDelay: Duration.Duration | undefined
      const wait = (until: number | undefined) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const d = until === undefined ? delay : min(delay, Duration.millis(Math.max(0, until - now)))
          const woken = yield* Effect.raceAll([
            Effect.as(Effect.sleep(d), "poll" as const),
            Effect.as(mailbox.take, "wake" as const),
            Effect.as(own.changed, "change" as const),
            Effect.as(Deferred.await(stop), "stop" as const)
          ])
          if (woken !== "poll") delay = s.pollBase
          if (woken === "wake") {
            wakes++
            wokenAt = yield* Clock.currentTimeMillis
          }
        })
      while (!(yield* Deferred.isDone(stop))) {
        const now = yield* Clock.currentTimeMillis
        // While a backlog lasts the workers split the partitions. Otherwise the first worker to start
        // takes every ready one: a wake-up starts one idle worker, whose share alone left the other
        // shares' events to further reads (a third fewer reads at 200 and 1,000 events/s).
        const share = backlog || reading > 0
          ? Math.max(1, Math.ceil(own.held.size / s.concurrency))
          : Math.max(1, own.held.size)
        const picked = own.take(now, share)
        if (picked.length === 0) {
          yield* wait(own.nextDue(now))
          continue
        }
        yield* mailbox.clear
        reading++
        const whole = picked.length === own.held.size
        const wakesBefore = wakes
        const seen = { heldBack: false }
        const outcome = yield* Effect.uninterruptibleMask((restore) => batch(restore, picked, seen)).pipe(
          Effect.ensuring(Effect.suspend(() => {
            reading--
            for (const h of picked) h.busy = false
            // Partitions with a backlog are free again: a waiting worker may take its share.
            if (backlog) own.signal()
            return releaseNow(own.releasable())
          }))
        )
        if (outcome !== "held-back") heldDelay = undefined
        if (outcome === "worked") outage = false
        if (outcome === "paused") {
          outage = true
          // An outage (broker or database away): wait until it is back, then a growing pause, so that
          // a dependency that says it is back but is not yet costs no busy loop.
          yield* Effect.raceFirst(Effect.andThen(awaitResumable, Effect.sleep(delay)), Deferred.await(stop))
          delay = min(Duration.max(Duration.times(delay, 2), s.pollBase), s.pollMax)
        } else if (outcome === "error") {
          delay = min(Duration.max(Duration.times(delay, 2), s.pollBase), s.pollMax)
          yield* wait(undefined)
        } else if (outcome === "held-back") {
          // Committed events wait behind an older open transaction: look again soon, then less and
          // less often while it stays open (its commit usually wakes the worker first).
          heldDelay = heldDelay === undefined
            ? Duration.max(s.pollMin, Duration.millis(2))
            : min(Duration.times(heldDelay, 2), s.pollBase)
          delay = heldDelay
          yield* wait(undefined)
          continue
        } else if (outcome === "empty") {
          // Other partitions may still have a backlog: read them before sleeping.
          if (own.hasUndrained(yield* Clock.currentTimeMillis)) continue
          delay = Duration.isLessThan(delay, s.pollBase) ? s.pollBase : min(Duration.times(delay, 2), s.pollMax)
          yield* wait(own.nextDue(yield* Clock.currentTimeMillis))
          own.undrain()
        } else {
          delay = s.pollBase
          if (Duration.toMillis(s.pollMin) > 0) yield* Effect.sleep(s.pollMin)
          // This read covered every partition and left nothing behind (no batch filled, none held
          // back), and wake-ups arrive (one came within the longest poll): whatever commits from now
          // on wakes a worker, so the read that would follow finds nothing and is left out. A wake-up
          // another worker took meanwhile is one this read may not have seen: read again then.
          const now = yield* Clock.currentTimeMillis
          if (
            whole && !backlog && !seen.heldBack && wakes === wakesBefore &&
            now - wokenAt < Duration.toMillis(s.pollMax)
          ) {
            yield* wait(own.nextDue(now))
          }
        }
      }
    }).pipe(Effect.scoped, Effect.ensuring(Effect.sync(() => running--)))

    /** One read, processed and settled; never fails (errors are logged and reported as `error`). */
    const batch = (
      restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>,
      picked: ReadonlyArray<Held>,
      seen: { heldBack: boolean }
    ) =>
      Effect.gen(function*() {
        const read = yield* store.read(s.group, s.member, picked.map((h) => request(h, s.batchSize))).pipe(
          LogSpans.receive(s.group, picked.length)
        )
        for (const p of read.lost) {
          own.drop(p)
          yield* Metric.update(Metric.withAttributes(Metrics.log.fenced, attrs), 1)
        }
        seen.heldBack = read.heldBack.length > 0
        if (seen.heldBack) yield* Metric.update(Metric.withAttributes(Metrics.log.heldBack, attrs), 1)
        const byPartition = new Map<number, Array<LogStore.LogEvent>>()
        for (const e of read.events) {
          const list = byPartition.get(e.partition)
          if (list === undefined) byPartition.set(e.partition, [e])
          else list.push(e)
        }
        const batches: Array<Batch> = []
        const loops: Array<Plan> = []
        let full = false
        for (const h of picked) {
          const events = byPartition.get(h.partition)
          h.drained = events === undefined && !read.heldBack.includes(h.partition)
          if (events === undefined || read.lost.includes(h.partition)) continue
          full ||= events.length >= request(h, s.batchSize).limit
          if (h.crashes >= s.maxCrashes) loops.push(crashLoop(h, events[0]!))
          else batches.push({ held: h, events })
        }
        // A backlog: wake the idle workers to take their shares (read the rest sooner than a poll).
        if (full && !backlog) own.signal()
        backlog = full
        if (batches.length === 0 && loops.length === 0) {
          return read.heldBack.length > 0
            ? "held-back" as const
            : "empty" as const
        }
        const processed = yield* processor(restore, batches)
        const looped = yield* settleOnly(loops)
        if (loops.length > 0) {
          yield* Effect.logError(
            `log group ${s.group}: ${loops.length} events failed for good: their handling crashed the process ${s.maxCrashes} times`
          )
        }
        const now = yield* Clock.currentTimeMillis
        const states = new Map([...processed.states, ...looped].map((st) => [st.partition, st]))
        let paused = false
        for (const p of [...processed.plans, ...loops]) {
          const h = own.held.get(p.settlement.partition)
          const st = states.get(p.settlement.partition)
          if (h === undefined) continue
          if (st === undefined) {
            own.drop(h.partition)
            yield* Metric.update(Metric.withAttributes(Metrics.log.fenced, attrs), 1)
            continue
          }
          apply(h, st, now)
          paused ||= p.paused
        }
        if (loops.length > 0) yield* Metric.update(Metrics.failed, loops.length)
        return paused ? "paused" as const : "worked" as const
      }).pipe(
        // The database away is an outage like the broker's: the worker pauses, no attempt is counted.
        Effect.catch((e) =>
          Effect.as(
            Effect.logWarning(`log group ${s.group}: a batch failed; its partitions are read again`, e),
            isUnavailable(e) ? "paused" as const : "error" as const
          )
        )
      )

    const leaser = yield* Effect.forkScoped(leaseLoop)
    const workers = yield* Effect.forEach(Array.from({ length: s.concurrency }), () => Effect.forkScoped(worker))

    // Runs before the scope interrupts the fibers forked above (finalizers run in reverse order).
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* Fiber.interrupt(leaser)
        yield* Deferred.succeed(stop, undefined)
        const done = yield* Fiber.awaitAll(workers).pipe(Effect.timeoutOption(s.shutdownTimeout))
        if (Option.isNone(done)) {
          yield* Effect.logWarning(
            `log group ${s.group}: in-flight batches did not finish within ${
              Duration.format(s.shutdownTimeout)
            }; their next owner does them again`
          )
          yield* Fiber.interruptAll(workers)
        }
        for (const h of own.held.values()) h.busy = false
        yield* releaseNow([...own.held.values()])
        yield* store.leave(s.group, s.member).pipe(Effect.ignore({ log: true }))
        yield* Metric.update(Metric.withAttributes(Metrics.log.partitions, attrs), 0)
      })
    )
    return {
      ownership: own,
      isRunning: Effect.sync(() => running > 0),
      isPaused: Effect.sync(() => running > 0 && outage),
      stopped: Effect.asVoid(Fiber.awaitAll(workers))
    }
  })
