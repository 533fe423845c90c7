/**
 * Where an event's commit → confirm time goes in the RabbitMQ runs. The store and the publisher are
 * wrapped so that every measured event gets three stamps besides its commit:
 *
 * - `wait`: commit → a claim (or settle-and-claim) statement returned it: the wake-up, waiting for a
 *   free relay, and the claim statement itself (eager dispatch: commit → the publish call);
 * - `prepare`: claimed → the relay called `publish` (spans, trace headers);
 * - `confirm`: `publish` called → it returned `Published`: encoding, the socket write, the broker's
 *   confirm and, since a batch returns as a whole, the batch's slowest confirm.
 *
 * It also times the statements (`claimSql`, `settleSql`) and counts events per publish call.
 * @module
 */
import type * as OutboxStorePort from "@tidings/core/OutboxStore"
import { Publisher } from "@tidings/core/Publisher"
import type * as PublisherPort from "@tidings/core/Publisher"
import { Effect } from "effect"
import { percentile, round, sorted } from "./stats.ts"

/** p50 / p99 of each stage in milliseconds, as printed in the JSON output. */
export interface Summary {
  readonly waitP50Ms: number
  readonly waitP99Ms: number
  readonly prepareP50Ms: number
  readonly prepareP99Ms: number
  readonly confirmP50Ms: number
  readonly confirmP99Ms: number
  readonly claimSqlP50Ms: number
  readonly claimSqlP99Ms: number
  readonly settleSqlP50Ms: number
  readonly settleSqlP99Ms: number
  /** Mean events per `publish` call. */
  readonly eventsPerPublish: number
}

/** Stage stamps of the measured events (see the module docs). */
export class Stages {
  readonly #commits = new Map<string, number>()
  readonly #claimed = new Map<string, number>()
  readonly #publishing = new Map<string, number>()
  readonly #wait: Array<number> = []
  readonly #prepare: Array<number> = []
  readonly #confirm: Array<number> = []
  readonly #claimSql: Array<number> = []
  readonly #settleSql: Array<number> = []
  #publishCalls = 0
  #published = 0
  #recording = false

  /** Called by the producer after its commit; only measured events are followed. */
  committed(id: string, at: number, measured: boolean): void {
    if (!measured) return
    this.#recording = true
    this.#commits.set(id, at)
  }

  /** Wraps `store` so that claims stamp their events and statements are timed. */
  store(store: OutboxStorePort.Service): OutboxStorePort.Service {
    const claimed = (rows: ReadonlyArray<OutboxStorePort.ClaimedEvent>, started: number, into: Array<number>) =>
      Effect.sync(() => {
        const at = performance.now()
        if (!this.#recording) return
        into.push(at - started)
        for (const r of rows) this.#claimed.set(r.message.id, at)
      })
    return {
      ...store,
      claim: (o) =>
        Effect.suspend(() => {
          const started = performance.now()
          return Effect.tap(store.claim(o), (rows) => claimed(rows, started, this.#claimSql))
        }),
      settleAndClaim: (relayId, settlement, next) =>
        Effect.suspend(() => {
          const started = performance.now()
          return Effect.tap(store.settleAndClaim(relayId, settlement, next), (rows) =>
            claimed(rows, started, this.#settleSql))
        }),
      settle: (relayId, settlement) =>
        Effect.suspend(() => {
          const started = performance.now()
          return Effect.tap(store.settle(relayId, settlement), () =>
            Effect.sync(() => void (this.#recording && this.#settleSql.push(performance.now() - started))))
        })
    }
  }

  /** Wraps `inner` so that publish calls and their confirmations stamp their events. */
  publisher(inner: PublisherPort.Service): PublisherPort.Service {
    return Publisher.of({
      publish: (messages) =>
        Effect.suspend(() => {
          const at = performance.now()
          if (this.#recording) {
            this.#publishCalls++
            this.#published += messages.length
            for (const m of messages) this.#publishing.set(m.id, at)
          }
          return Effect.tap(inner.publish(messages), (results) =>
            Effect.sync(() => {
              const done = performance.now()
              for (const r of results) if (r._tag === "Published") this.#confirmed(r.id, done)
            }))
        })
    })
  }

  #confirmed(id: string, at: number): void {
    const commit = this.#commits.get(id)
    const claimed = this.#claimed.get(id)
    const publishing = this.#publishing.get(id)
    this.#commits.delete(id)
    this.#claimed.delete(id)
    this.#publishing.delete(id)
    // Unmeasured (warm-up) events, and the rare one claimed before its producer stamped the commit.
    if (commit === undefined || publishing === undefined) return
    this.#confirm.push(at - publishing)
    // Eager dispatch: handed to the relay after the commit, never claimed (commit → publish call is
    // all wait). The rare event claimed before its producer stamped the commit is left out.
    if (claimed === undefined) {
      this.#wait.push(publishing - commit)
      this.#prepare.push(0)
      return
    }
    if (claimed < commit) return
    this.#wait.push(claimed - commit)
    this.#prepare.push(publishing - claimed)
  }

  summary(): Summary {
    const p = (values: ReadonlyArray<number>, q: number) => round(percentile(sorted(values), q))
    return {
      waitP50Ms: p(this.#wait, 50),
      waitP99Ms: p(this.#wait, 99),
      prepareP50Ms: p(this.#prepare, 50),
      prepareP99Ms: p(this.#prepare, 99),
      confirmP50Ms: p(this.#confirm, 50),
      confirmP99Ms: p(this.#confirm, 99),
      claimSqlP50Ms: p(this.#claimSql, 50),
      claimSqlP99Ms: p(this.#claimSql, 99),
      settleSqlP50Ms: p(this.#settleSql, 50),
      settleSqlP99Ms: p(this.#settleSql, 99),
      eventsPerPublish: round(this.#publishCalls === 0 ? 0 : this.#published / this.#publishCalls, 1)
    }
  }
}
