// Publishing on confirm channels with many confirms in flight, shared by AmqpPublisher and the
// consumer's delayed retries. Each message gets its own outcome: confirmed, or failed with a reason
// (nack, basic.return of a mandatory message, no confirm in time, channel closed).
import { describe } from "@tidings/core/Errors"
import type { ConfirmChannel, Message as AmqpMessage, Options } from "amqplib"
import { Effect, type Scope } from "effect"
import type { Buffer } from "node:buffer"
import type { Service as Connection } from "../AmqpConnection.ts"
import { AmqpConnectionError, type TopologyError } from "../AmqpErrors.ts"

/** One message to publish. `options.messageId` identifies it in a basic.return. */
export interface Outgoing {
  readonly exchange: string
  readonly routingKey: string
  readonly content: Buffer
  readonly options: Options.Publish & { readonly messageId: string }
}

/** The outcome of one message. */
export type Outcome =
  | { readonly _tag: "Confirmed" }
  | {
    readonly _tag: "Failed"
    readonly kind: "nack" | "returned" | "timeout" | "closed" | "invalid"
    readonly reason: string
    readonly retryable: boolean
  }

export interface ConfirmPublisher {
  /** Publishes all, then waits for all confirms (or `timeoutMs`). Fails only when no channel is open. */
  readonly publish: (
    batch: ReadonlyArray<Outgoing>,
    timeoutMs: number
  ) => Effect.Effect<ReadonlyArray<Outcome>, AmqpConnectionError>
  /** Messages published and not yet confirmed, over all channels. */
  readonly inFlight: () => number
  /** The most messages ever in flight at once (shows that batches are pipelined). */
  readonly maxInFlight: () => number
  /** How often publishing paused for the channel's 'drain' (amqplib's write buffer was full). */
  readonly drainWaits: () => number
}

interface PendingReturn {
  returned: { readonly code: number; readonly text: string } | undefined
}

interface Slot {
  channel: ConfirmChannel | undefined
  lastError: string | undefined
  readonly returns: Map<string, Array<PendingReturn>>
  /** Callbacks waiting for 'drain' (or for the channel to close). */
  readonly waiters: Set<() => void>
}

const failed = (kind: Extract<Outcome, { _tag: "Failed" }>["kind"], reason: string, retryable: boolean): Outcome => ({
  _tag: "Failed",
  kind,
  reason,
  retryable
})

export interface Options {
  readonly name: string
  /** Confirm channels to spread concurrent batches over (default 1). */
  readonly channels?: number
  /** Whether a basic.return (no queue bound for the routing key) is worth retrying later (default true). */
  readonly unroutableRetryable?: boolean
}

export const make = (
  connection: Connection,
  options: Options
): Effect.Effect<ConfirmPublisher, AmqpConnectionError | TopologyError, Scope.Scope> =>
  Effect.gen(function*() {
    const unroutableRetryable = options.unroutableRetryable ?? true
    const slots: Array<Slot> = Array.from({ length: Math.max(1, options.channels ?? 1) }, () => ({
      channel: undefined,
      lastError: undefined,
      returns: new Map(),
      waiters: new Set()
    }))
    let inFlight = 0
    let maxInFlight = 0
    let drainWaits = 0
    let next = 0

    const wake = (slot: Slot) => {
      const waiters = [...slot.waiters]
      slot.waiters.clear()
      for (const w of waiters) w()
    }

    for (const [index, slot] of slots.entries()) {
      yield* connection.register({
        name: `${options.name}/confirm-${index}`,
        open: (channels) =>
          Effect.gen(function*() {
            const channel = yield* channels.confirmChannel
            slot.lastError = undefined
            channel.on("error", (error: unknown) => {
              slot.lastError = connection.scrub(describe(error))
            })
            // Prepended: runs before amqplib fails the unconfirmed callbacks, so that they see the
            // channel as closed (and report "channel closed", not "nacked").
            channel.prependListener("close", () => {
              if (slot.channel === channel) slot.channel = undefined
              wake(slot)
            })
            channel.on("drain", () => wake(slot))
            channel.on("return", (message: AmqpMessage) => {
              const id: unknown = message.properties.messageId
              const pending = typeof id === "string"
                ? slot.returns.get(id)?.find((p) => p.returned === undefined)
                : undefined
              // A basic.return carries replyCode / replyText where deliveries have a delivery tag.
              const fields = message.fields as unknown as { readonly replyCode?: number; readonly replyText?: string }
              if (pending !== undefined) {
                pending.returned = { code: fields.replyCode ?? 312, text: fields.replyText ?? "NO_ROUTE" }
              }
            })
            slot.channel = channel
          }),
        onClose: () => Effect.sync(() => void (slot.channel = undefined))
      })
    }

    const pick = (): readonly [Slot, ConfirmChannel] | undefined => {
      for (let i = 0; i < slots.length; i++) {
        const slot = slots[(next + i) % slots.length]!
        if (slot.channel !== undefined) {
          next = (next + i + 1) % slots.length
          return [slot, slot.channel]
        }
      }
      return undefined
    }

    const closedReason = (slot: Slot) => `channel closed${slot.lastError === undefined ? "" : `: ${slot.lastError}`}`

    const publishOn = (slot: Slot, channel: ConfirmChannel, batch: ReadonlyArray<Outgoing>, timeoutMs: number) =>
      Effect.callback<ReadonlyArray<Outcome>>((resume) => {
        const n = batch.length
        const results: Array<Outcome | undefined> = new Array(n)
        let remaining = n
        let done = false
        let sent = 0
        const registered: Array<readonly [string, PendingReturn]> = []
        const finish = () => {
          if (done) return
          done = true
          clearTimeout(timer)
          slot.waiters.delete(pump)
          for (const [id, pending] of registered) forget(id, pending)
          resume(Effect.succeed(results as Array<Outcome>))
        }
        const settle = (i: number, outcome: Outcome) => {
          if (done || results[i] !== undefined) return
          results[i] = outcome
          if (--remaining === 0) finish()
        }
        const forget = (id: string, pending: PendingReturn) => {
          const list = slot.returns.get(id)
          if (list === undefined) return
          const at = list.indexOf(pending)
          if (at >= 0) list.splice(at, 1)
          if (list.length === 0) slot.returns.delete(id)
        }
        const timer = setTimeout(() => {
          for (let i = 0; i < n; i++) {
            if (results[i] === undefined) {
              results[i] = i < sent
                ? failed("timeout", `no confirm from the broker within ${timeoutMs} ms`, true)
                : failed("timeout", `not sent within ${timeoutMs} ms (channel backpressure)`, true)
            }
          }
          remaining = 0
          finish()
        }, timeoutMs)
        function pump() {
          while (sent < n && !done) {
            const i = sent++
            if (slot.channel !== channel) {
              settle(i, failed("closed", closedReason(slot), true))
              continue
            }
            const item = batch[i]!
            const pending: PendingReturn = { returned: undefined }
            const id = item.options.messageId
            let list = slot.returns.get(id)
            if (list === undefined) slot.returns.set(id, list = [])
            list.push(pending)
            registered.push([id, pending])
            let ok: boolean
            inFlight++
            if (inFlight > maxInFlight) maxInFlight = inFlight
            try {
              ok = channel.publish(item.exchange, item.routingKey, item.content, item.options, (error: unknown) => {
                inFlight--
                forget(id, pending)
                if (error !== null && error !== undefined) {
                  settle(
                    i,
                    slot.channel === channel
                      ? failed("nack", "nacked by the broker", true)
                      : failed("closed", closedReason(slot), true)
                  )
                } else if (pending.returned !== undefined) {
                  settle(
                    i,
                    failed(
                      "returned",
                      `unroutable: ${pending.returned.code} ${pending.returned.text} (exchange '${item.exchange}', routing key '${item.routingKey}')`,
                      unroutableRetryable
                    )
                  )
                } else {
                  settle(i, { _tag: "Confirmed" })
                }
              })
            } catch (error) {
              inFlight--
              forget(id, pending)
              // A RangeError (headers over 64 KiB) fails again on every try; an IllegalOperationError
              // means the channel closed under us.
              settle(
                i,
                error instanceof RangeError
                  ? failed("invalid", `cannot be encoded: ${error.message}`, false)
                  : failed("closed", closedReason(slot), true)
              )
              continue
            }
            if (!ok) {
              // amqplib's buffer is full: wait for 'drain' (or close) before writing more.
              drainWaits++
              slot.waiters.add(pump)
              return
            }
          }
        }
        pump()
        return Effect.sync(() => {
          done = true
          clearTimeout(timer)
          slot.waiters.delete(pump)
          for (const [rid, pending] of registered) forget(rid, pending)
        })
      })

    const publish = (
      batch: ReadonlyArray<Outgoing>,
      timeoutMs: number
    ): Effect.Effect<ReadonlyArray<Outcome>, AmqpConnectionError> =>
      Effect.suspend(() => {
        if (batch.length === 0) return Effect.succeed([])
        const picked = pick()
        if (picked === undefined) {
          return Effect.fail(
            new AmqpConnectionError({
              operation: "publish",
              message: "no open channel (reconnecting)",
              retryable: true
            })
          )
        }
        return publishOn(picked[0], picked[1], batch, timeoutMs)
      })

    return { publish, inFlight: () => inFlight, maxInFlight: () => maxInFlight, drainWaits: () => drainWaits }
  })
