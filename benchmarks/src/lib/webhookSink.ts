/**
 * The webhook benchmark's receiver, a process of its own (`node benchmarks/src/lib/webhookSink.ts`),
 * so that answering requests does not share an event loop with the sender being measured. It
 * answers every POST with 204 and counts them by `webhook-id`; `GET /stats` gives the counts and
 * `POST /reset` clears them. It prints `listening <port>` once it accepts connections.
 * @module
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

let received = 0
let ids = new Set<string>()

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/stats") {
    res.writeHead(200, { "content-type": "application/json" })
    res.end(JSON.stringify({ received, distinct: ids.size }))
    return
  }
  if (req.url === "/reset") {
    received = 0
    ids = new Set()
    req.resume()
    res.writeHead(204).end()
    return
  }
  // Read the body, as a real receiver must before it can verify the signature.
  req.on("data", () => undefined)
  req.on("end", () => {
    received++
    ids.add(String(req.headers["webhook-id"]))
    res.writeHead(204).end()
  })
})
server.keepAliveTimeout = 60_000
server.listen(0, "127.0.0.1", () => console.log(`listening ${(server.address() as AddressInfo).port}`))
process.on("SIGTERM", () => server.close(() => process.exit(0)))
