/**
 * A real HTTP receiver for the tests: node:http on 127.0.0.1 (Node, Deno and Bun all have it), whose
 * answers are scripted per request, and which checks every request's signature with the reference
 * implementation (`standardwebhooks`).
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { Webhook } from "standardwebhooks"

/** One request as the receiver saw it. */
export interface Received {
  readonly n: number
  readonly at: number
  readonly id: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
  readonly json: any
  /** The `standardwebhooks` verifier accepted the request. */
  readonly verified: boolean
}

/** What to answer. `hang`: never answer (until the server closes). */
export interface Answer {
  readonly status?: number
  readonly headers?: Record<string, string>
  readonly body?: string
  readonly delayMs?: number
  readonly hang?: boolean
}

export interface Receiver {
  readonly url: string
  readonly port: number
  readonly received: Array<Received>
  /** Requests being answered right now, and the most at once so far. */
  readonly inFlight: () => number
  readonly maxInFlight: () => number
  readonly close: () => Promise<void>
}

/** Starts a receiver on `port` (0: a free one). */
export const startReceiver = (
  secret: string,
  answer: (r: Received) => Answer | Promise<Answer> = () => ({ status: 204 }),
  port = 0
): Promise<Receiver> =>
  new Promise((resolve, reject) => {
    const received: Array<Received> = []
    let inFlight = 0
    let maxInFlight = 0
    const webhook = new Webhook(secret)
    const server = http.createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", async () => {
        inFlight++
        maxInFlight = Math.max(maxInFlight, inFlight)
        const body = Buffer.concat(chunks).toString("utf8")
        let verified = false
        try {
          webhook.verify(body, req.headers as Record<string, string>)
          verified = true
        } catch {
          verified = false
        }
        let json: unknown
        try {
          json = JSON.parse(body)
        } catch {
          json = undefined
        }
        const r: Received = {
          n: received.length + 1,
          at: Date.now(),
          id: String(req.headers["webhook-id"]),
          headers: req.headers,
          body,
          json,
          verified
        }
        received.push(r)
        const a = await answer(r)
        if (a.hang) {
          res.on("close", () => inFlight--)
          return
        }
        if (a.delayMs !== undefined) await new Promise((done) => setTimeout(done, a.delayMs))
        inFlight--
        res.writeHead(a.status ?? 204, a.headers ?? {})
        res.end(a.body ?? "")
      })
    })
    server.once("error", reject)
    server.listen(port, "127.0.0.1", () => {
      const actual = (server.address() as AddressInfo).port
      resolve({
        url: `http://127.0.0.1:${actual}/hooks`,
        port: actual,
        received,
        inFlight: () => inFlight,
        maxInFlight: () => maxInFlight,
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done())
            server.closeAllConnections()
          })
      })
    })
  })

/** Waits until `check` holds (no cap: see test/support/progress.ts). */
export { until } from "../../../test/support/progress.ts"
