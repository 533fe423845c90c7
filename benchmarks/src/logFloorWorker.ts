/**
 * The floor of the log latency phase: the least a reader in another process can do, with the same
 * protocol as `logWorker.ts` (`logLatency.ts` forks either):
 * `node logFloorWorker.ts <url> <schema> <channel>`.
 *
 * A bare postgres.js client, no Effect: it LISTENs on the store's channel and, on each
 * notification, reads the log after an in-memory position, below the same horizon as the relay
 * (`tx_id < pg_snapshot_xmin(pg_current_snapshot())`), in `(tx_id, seq)` order; while committed
 * rows wait behind an open transaction it looks again every millisecond. It keeps no cursor in the
 * database, takes no lease and publishes nowhere: what it measures is this machine's commit →
 * NOTIFY → read path with another process's scheduling, which a relay cannot beat.
 * @module
 */
import "./lib/stdio.ts" // first: keeps stray console output off stdout
import postgres from "postgres"
import { monotonicMs } from "./lib/monotonic.ts"
import type { FromLogWorker, ToLogWorker } from "./logWorker.ts"

const [url, schema, channel] = process.argv.slice(2) as [string, string, string]

const send = (message: FromLogWorker) =>
  new Promise<void>((resolve) => process.send!(message, undefined, {}, () => resolve()))

const sql = postgres(url, { max: 2, onnotice: () => {} })
const log = `"${schema}".log`
let position = { tx: "0", seq: "0" }
let ids: Array<string> = []
let at: Array<number> = []
let reading = false
let again = false

const readOnce = async () => {
  const rows = await sql.unsafe<Array<{ id: string; tx: string; seq: string }>>(
    `SELECT id, tx_id::text AS tx, seq::text AS seq FROM ${log}
     WHERE (tx_id, seq) > ($1::xid8, $2::bigint) AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
     ORDER BY tx_id, seq LIMIT 1000`,
    [position.tx, position.seq]
  )
  const now = monotonicMs()
  for (const r of rows) {
    ids.push(r.id)
    at.push(now)
  }
  const last = rows[rows.length - 1]
  if (last !== undefined) position = { tx: last.tx, seq: last.seq }
  return rows.length
}

const heldBack = async () =>
  (await sql.unsafe(`SELECT 1 FROM ${log} WHERE tx_id >= pg_snapshot_xmin(pg_current_snapshot()) LIMIT 1`))
    .length > 0

/** Reads until nothing is left (notifications during a read make it read once more). */
const read = async (): Promise<void> => {
  if (reading) {
    again = true
    return
  }
  reading = true
  try {
    do {
      again = false
      if ((await readOnce()) > 0) again = true
      else if (await heldBack()) {
        await new Promise((resolve) => setTimeout(resolve, 1))
        again = true
      }
    } while (again)
  } finally {
    reading = false
  }
}

const flush = async () => {
  if (ids.length === 0) return
  const message: FromLogWorker = { type: "published", ids, at }
  ids = []
  at = []
  await send(message)
}

try {
  await sql.listen(channel, () => void read().catch((e) => console.error(e)))
  await send({
    type: "held",
    partitions: Number((await sql.unsafe(`SELECT partitions FROM "${schema}".log_stream`))[0]!.partitions)
  })
  const cpu = process.cpuUsage()
  const timer = setInterval(() => void flush(), 10)
  await new Promise<void>((resolve) => process.on("message", (m: ToLogWorker) => m.type === "stop" && resolve()))
  clearInterval(timer)
  await read()
  await flush()
  const used = process.cpuUsage(cpu)
  await sql.end({ timeout: 5 })
  await send({ type: "done", cpuMs: (used.user + used.system) / 1000 })
} catch (e) {
  await send({ type: "failed", error: String(e) })
  process.exitCode = 1
}
process.disconnect?.()
