import { WebhookPublisher, WebhookSignature } from "@tidings/webhooks"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as Seed from "../src/lib/seed.ts"
const child = spawn(process.execPath, ["benchmarks/src/lib/webhookSink.ts"], { stdio: ["ignore", "pipe", "inherit"] })
const port = await new Promise<number>((r) => child.stdout!.on("data", (d: Buffer) => { const m = /listening (\d+)/.exec(d.toString()); if (m) r(Number(m[1])) }))
const url = `http://127.0.0.1:${port}/hooks`
const secret = WebhookSignature.generateSecret()
const N = Number(process.argv[2] ?? 5000), C = Number(process.argv[3] ?? 64)
const msgs = await Effect.runPromise(Seed.messages(N))
const pub = await Effect.runPromise(WebhookPublisher.make({ endpoints: [{ url, secret, concurrency: C }] }))
const rawLoop = async (signed: boolean) => {
  const key = await crypto.subtle.importKey("raw", WebhookSignature.fromBase64(secret.slice(6))! as Uint8Array<ArrayBuffer>, { name: "HMAC", hash: "SHA-256" }, false, ["sign"])
  let next = 0; const t0 = performance.now(); const enc = new TextEncoder()
  await Promise.all(Array.from({ length: C }, async () => { while (next < N) { const m = msgs[next++]!; const body = WebhookPublisher.defaultBody(m); const ts = Math.floor(Date.now() / 1000); const h: Record<string, string> = { "content-type": "application/json", "webhook-id": m.id, "webhook-timestamp": String(ts) }; if (signed) h["webhook-signature"] = "v1," + WebhookSignature.toBase64(new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(`${m.id}.${ts}.${body}`)))); const r = await fetch(url, { method: "POST", headers: h, body }); await r.arrayBuffer() } }))
  return Math.round(N / ((performance.now() - t0) / 1000))
}
const pubLoop = async (relays: number, batch: number) => {
  let next = 0; const t0 = performance.now()
  await Promise.all(Array.from({ length: relays }, async () => { while (next < N) { const b = msgs.slice(next, next + batch); next += batch; await Effect.runPromise(pub.publish(b)) } }))
  return Math.round(N / ((performance.now() - t0) / 1000))
}
await rawLoop(true); await pubLoop(4, 100)
for (let i = 0; i < 3; i++) console.log(`raw signed ${await rawLoop(true)}/s  raw unsigned ${await rawLoop(false)}/s  publisher 4x100 ${await pubLoop(4, 100)}/s  publisher 8x100 ${await pubLoop(8, 100)}/s`)
child.kill()
