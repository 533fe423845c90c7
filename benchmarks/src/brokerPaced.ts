/**
 * The broker's own floor for the e2e phase's paced runs: raw amqplib publishes the same messages
 * from memory on a confirm channel into a fresh classic queue, `txEvents` at a time on the paced
 * runs' schedule, with no database and no relay, and each message's publish → confirm is recorded.
 * A relay cannot confirm sooner than the broker does at the same rate on the same machine.
 * @module
 */
import type { Message } from "@tidings/core/Message"
import { Effect } from "effect"
import * as Rabbit from "./lib/rabbit.ts"
import { percentile, round, sorted } from "./lib/stats.ts"

/** What a paced run of the broker alone measured. */
export interface BrokerPacedRun {
  readonly rate: number
  readonly p50Ms: number
  readonly p99Ms: number
}

/** Publishes `rate × seconds` of `msgs` (cycled) on schedule and reports publish → confirm. */
export const run = (
  rabbitUrl: string,
  rate: number,
  seconds: number,
  txEvents: number,
  msgs: ReadonlyArray<Message>
): Effect.Effect<BrokerPacedRun> =>
  Effect.scoped(Effect.gen(function*() {
    const { channel, exchange } = yield* Rabbit.confirmTarget(rabbitUrl, "e2e-broker")
    const total = Math.round(rate * seconds)
    const latencies: Array<number> = []
    yield* Effect.promise(() =>
      new Promise<void>((resolve) => {
        const start = performance.now()
        let sent = 0
        let confirmed = 0
        const tick = () => {
          const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * rate))
          while (sent < due) {
            // A "transaction" of txEvents messages, sent together as a relay would publish them.
            const at = performance.now()
            for (let j = 0; j < txEvents && sent < due; j++, sent++) {
              const m = Rabbit.outgoing(msgs[sent % msgs.length]!, exchange)
              channel.publish(m.exchange, m.routingKey, m.content, m.options, () => {
                latencies.push(performance.now() - at)
                if (++confirmed === total) resolve()
              })
            }
          }
          if (sent < total) setTimeout(tick, 1)
        }
        tick()
      })
    )
    const s = sorted(latencies)
    return { rate, p50Ms: round(percentile(s, 50)), p99Ms: round(percentile(s, 99)) }
  }))
