/**
 * Start-up of `AmqpConnection.layer` when the broker closes the connection while the topology is
 * being declared: a connection failure to retry within `startupTimeout`, not a terminal error.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer } from "effect"
import * as net from "node:net"
import * as AmqpConnection from "../src/AmqpConnection.ts"
import * as Topology from "../src/Topology.ts"
import { amqpUrl, captureLogs, fastReconnect, rawChannel, unique } from "./helpers.ts"

/**
 * A TCP proxy to the broker that cuts the first `cuts` connections (both sockets destroyed) as soon
 * as the client sends a `queue.declare` (class 50, method 10): the connection is lost in the middle of
 * the topology declaration, as when the broker forces it closed or restarts just then.
 */
const cuttingProxy = (target: URL, cuts: number) =>
  Effect.acquireRelease(
    Effect.promise(() => {
      let remaining = cuts
      const sockets = new Set<net.Socket>()
      const server = net.createServer((client) => {
        const upstream = net.connect(Number(target.port || 5672), target.hostname)
        for (const s of [client, upstream]) {
          sockets.add(s)
          s.on("error", () => undefined)
          s.on("close", () => {
            client.destroy()
            upstream.destroy()
            sockets.delete(s)
          })
        }
        let cut = remaining > 0
        if (cut) remaining--
        // client -> broker: 8 bytes of protocol header, then frames (type, channel, size, payload, end)
        let buffer = Buffer.alloc(0)
        let headerSeen = false
        client.on("data", (chunk: Buffer) => {
          if (cut) {
            buffer = Buffer.concat([buffer, chunk])
            if (!headerSeen && buffer.length >= 8) {
              headerSeen = true
              buffer = buffer.subarray(8)
            }
            while (headerSeen && buffer.length >= 7) {
              const size = buffer.readUInt32BE(3)
              if (buffer.length < 8 + size) break
              if (buffer[0] === 1 && size >= 4 && buffer.readUInt16BE(7) === 50 && buffer.readUInt16BE(9) === 10) {
                cut = false
                client.destroy()
                upstream.destroy()
                return
              }
              buffer = buffer.subarray(8 + size)
            }
          }
          upstream.write(chunk)
        })
        upstream.on("data", (chunk: Buffer) => client.write(chunk))
      })
      return new Promise<{ port: number; cut: () => number; close: () => Promise<void> }>((resolve) =>
        server.listen(0, "127.0.0.1", () => {
          const address = server.address()
          resolve({
            port: typeof address === "object" && address !== null ? address.port : 1,
            cut: () => cuts - remaining,
            close: () =>
              new Promise<void>((done) => {
                for (const s of sockets) s.destroy()
                server.close(() => done())
              })
          })
        })
      )
    }),
    (proxy) => Effect.promise(() => proxy.close())
  )

const viaProxy = (port: number) => {
  const url = new URL(amqpUrl())
  url.hostname = "127.0.0.1"
  url.port = String(port)
  return url.toString()
}

describe("AmqpConnection start-up", () => {
  it.live(
    "the connection is lost while declaring the topology at the start-up deadline: it reconnects, declares again and builds",
    () =>
      Effect.gen(function*() {
        const proxy = yield* cuttingProxy(new URL(amqpUrl()), 1)
        const queue = unique("startup")
        const logs = captureLogs()
        // startupTimeout 0: the first attempt is the one made at the deadline
        const exit = yield* Effect.exit(Effect.scoped(
          Layer.build(AmqpConnection.layer({
            url: viaProxy(proxy.port),
            startupTimeout: 0,
            reconnect: fastReconnect,
            topology: Topology.make({ queues: [{ name: queue, type: "classic", durable: false, autoDelete: true }] })
          })).pipe(
            Effect.andThen(
              Effect.scoped(Effect.flatMap(rawChannel(), (channel) => Effect.promise(() => channel.checkQueue(queue))))
            )
          )
        )).pipe(
          Effect.provide(logs.layer)
        )
        assert.isTrue(Exit.isSuccess(exit), Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "")
        assert.strictEqual(proxy.cut(), 1, "the first connection was cut during the declaration")
      }).pipe(Effect.scoped),
    60_000
  )

  it.live(
    "within startupTimeout: connections lost while declaring are retried until one declares",
    () =>
      Effect.gen(function*() {
        const proxy = yield* cuttingProxy(new URL(amqpUrl()), 3)
        const exit = yield* Effect.exit(Effect.scoped(Layer.build(AmqpConnection.layer({
          url: viaProxy(proxy.port),
          startupTimeout: "5 minutes",
          reconnect: fastReconnect,
          topology: Topology.make({
            queues: [{ name: unique("startup"), type: "classic", durable: false, autoDelete: true }]
          })
        }))))
        assert.isTrue(Exit.isSuccess(exit), Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "")
        assert.strictEqual(proxy.cut(), 3)
      }).pipe(Effect.scoped),
    60_000
  )

  it.live(
    "the deadline holds: connections lost while declaring past it, after the one extra attempt, fail the start-up",
    () =>
      Effect.gen(function*() {
        const proxy = yield* cuttingProxy(new URL(amqpUrl()), 2)
        const exit = yield* Effect.exit(Effect.scoped(Layer.build(AmqpConnection.layer({
          url: viaProxy(proxy.port),
          startupTimeout: 0,
          reconnect: fastReconnect,
          topology: Topology.make({
            queues: [{ name: unique("startup"), type: "classic", durable: false, autoDelete: true }]
          })
        }))))
        assert.isTrue(Exit.isFailure(exit))
        assert.strictEqual(proxy.cut(), 2)
      }).pipe(Effect.scoped),
    60_000
  )
})
