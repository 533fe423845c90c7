/**
 * The drivers' readiness checks against the real servers: Postgres (`SELECT 1`) and RabbitMQ (the
 * connection's state), served by `/ready`.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Health from "@tidings/core/Health"
import * as PgClient from "@tidings/postgres/PgClient"
import * as AmqpConnection from "@tidings/rabbitmq/AmqpConnection"
import { Effect, Layer, Redacted, Schedule } from "effect"
import { Hono } from "hono"
import { inject } from "vitest"
import { pgClientLayer } from "../../../test/support/pg.ts"
import * as Routes from "../src/Routes.ts"
import * as Runtime from "../src/Runtime.ts"
import { waitUntil } from "./support.ts"

const amqpUrl = (): string => {
  const url = inject("amqpUrl") ?? process.env["TIDINGS_TEST_AMQP_URL"]
  if (url === undefined) throw new Error("no test RabbitMQ: run through vitest (global setup)")
  return url
}

const token = "readiness-admin-token-0123456789abcdef"

describe("readiness checks of the drivers", () => {
  it("postgres and rabbitmq up: /ready 200; the broker connection down: 503 naming it; back up: 200", async () => {
    const amqp = AmqpConnection.layer({
      url: amqpUrl(),
      name: "hono-readiness",
      reconnect: Schedule.spaced("1500 millis"),
      heartbeat: "5 seconds"
    })
    const rt = await Runtime.make(Layer.mergeAll(pgClientLayer(), amqp))
    try {
      const app = new Hono()
      app.route(
        "/",
        Routes.health(rt, { checks: [PgClient.readiness, AmqpConnection.readiness()], auth: Redacted.make(token) })
      )
      const ready = await app.request("/ready")
      expect(ready.status).toBe(200)
      expect(((await ready.json()) as Health.Report).checks.map((c) => [c.name, c.status])).toEqual([
        ["postgres", "up"],
        ["rabbitmq", "up"]
      ])

      await rt.runPromise(AmqpConnection.AmqpConnection.use((c) => c.restart))
      let report: Health.Report | undefined
      await waitUntil(
        async () => {
          const res = await app.request("/ready", { headers: { authorization: `Bearer ${token}` } })
          report = (await res.json()) as Health.Report
          return res.status === 503
        },
        5_000,
        "/ready to report the broker down"
      )
      expect(report!.checks.find((c) => c.name === "postgres")?.status).toBe("up")
      const broker = report!.checks.find((c) => c.name === "rabbitmq")!
      expect(broker.status).toBe("down")
      expect(broker.message).toMatch(/reconnecting|connecting|closed|set up/)
      expect(broker.message).not.toContain("guest:")

      await rt.runPromise(AmqpConnection.AmqpConnection.use((c) => c.awaitReady("10 seconds")))
      await waitUntil(async () => (await app.request("/ready")).status === 200, 5_000, "/ready to recover")
    } finally {
      await rt.dispose()
    }
  })

  it("postgres unreachable: the check is down with the driver's error, within the timeout", async () => {
    // A client on a port nothing listens on would fail its layer; instead end the pool under a live client.
    const rt = await Runtime.make(pgClientLayer())
    try {
      const check = await rt.runPromise(Health.run([PgClient.readiness], { timeout: "3 seconds" }))
      expect(check.status).toBe("up")
      await rt.runPromise(PgClient.PgClient.use((pg) => Effect.promise(() => pg.sql.end({ timeout: 0 }))))
      const down = await rt.runPromise(Health.run([PgClient.readiness], { timeout: "3 seconds" }))
      expect(down.status).toBe("down")
      expect(down.checks[0]!.message).toMatch(/SqlError|closed|CONNECTION/i)
    } finally {
      await rt.dispose()
    }
  })
})
