/**
 * Deno Deploy style: the orders service's `Deno.serve` entry and its relay worker run with
 * `deno run` from npm specifiers only (the import map `examples/orders/deploy/deno.json`, no
 * `node_modules`), against the test PostgreSQL; the relay worker also as one binary. The binary is
 * made by `bun build --compile`: `deno compile` downloads Deno's `denort` runtime from
 * dl.deno.land, which this machine cannot reach (see examples/orders/README.md).
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import * as Migrator from "@tidings/postgres/Migrator"
import * as PgOutboxStore from "@tidings/postgres/PgOutboxStore"
import { WebhookSignature } from "@tidings/webhooks"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as ImportMap from "../examples/orders/deploy/importMap.ts"
import { type Receiver, startReceiver, until } from "../packages/webhooks/test/receiver.ts"
import { pgClientLayer, pgUrl, schemaName } from "./support/pg.ts"
import { stopChild } from "./support/processes.ts"

declare const Deno: { execPath(): string } | undefined

const root = path.resolve(import.meta.dirname, "..")
const deploy = path.join(root, "examples/orders/deploy")
/** The runtime binary itself: node_modules/.bin/deno is a Node wrapper that would not pass SIGTERM on. */
const realBinary = (shim: string, code: string) => {
  const run = spawnSync(path.join(root, "node_modules/.bin", shim), ["eval", code], { encoding: "utf8" })
  if (run.status !== 0) throw new Error(`${shim}: ${run.stderr}`)
  return run.stdout.trim()
}
const deno = typeof Deno !== "undefined" ? Deno.execPath() : realBinary("deno", "console.log(Deno.execPath())")
const bun = path.join(root, "node_modules/.bin/bun")
const denoFlags = ["--no-config", "--import-map", path.join(deploy, "deno.json")]
const work = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-deploy-"))
const secret = WebhookSignature.generateSecret()

afterAll(() => fs.rmSync(work, { recursive: true, force: true }))

// Exit 0 on SIGTERM. Deno's node:child_process reports a child that handled SIGTERM and exited 0 as
// killed by it.
const stopped: ReadonlyArray<number | string> = typeof Deno !== "undefined" ? [0, "SIGTERM"] : [0]

type Child = ChildProcess & { readonly output: () => string }

/** Starts a process from `cwd` (a folder with no node_modules above the sources it runs). */
const start = (command: string, args: ReadonlyArray<string>, env: Record<string, string>): Child => {
  const child = spawn(command, [...args], {
    cwd: work,
    env: { ...process.env, NO_COLOR: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let output = ""
  child.stdout?.on("data", (d: Buffer) => void (output += d.toString()))
  child.stderr?.on("data", (d: Buffer) => void (output += d.toString()))
  return Object.assign(child, { output: () => output })
}

const waitForOutput = (child: Child, pattern: RegExp) =>
  until(`${pattern}`, () => {
    if (child.exitCode !== null) throw new Error(`exited (${child.exitCode}) before ${pattern}:\n${child.output()}`)
    return pattern.test(child.output())
  })

const OrderPlaced = Event.define("order.placed", {
  aggregateType: "order",
  schema: Schema.Struct({ orderId: Schema.String })
})

/** A fresh migrated schema with `n` pending events in its outbox; returns the schema and the event ids. */
const seed = (n: number) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(pgClientLayer(pgUrl(), 2))
    return yield* Effect.gen(function*() {
      const schema = schemaName("deploy")
      yield* Migrator.run({ schema })
      const store = yield* PgOutboxStore.make({ schema })
      const ids = yield* Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) =>
        Outbox.transaction(Outbox.append(OrderPlaced, { aggregateId: `o-${i}`, payload: { orderId: `o-${i}` } })).pipe(
          Effect.provideService(OutboxStore, store),
          Effect.map((m) =>
            m.id
          )
        ))
      return { schema, ids }
    }).pipe(Effect.provideContext(context))
  })))

const statuses = (schema: string) =>
  Effect.runPromise(
    SqlClient.SqlClient.use((sql) => sql<{ status: string }>`SELECT status FROM ${sql(`${schema}.outbox`)}`).pipe(
      Effect.provide(pgClientLayer(pgUrl(), 1))
    )
  )

/** Runs the relay worker (`command args`) against `n` seeded events until the receiver has them all, then stops it. */
const relays = async (command: string, args: ReadonlyArray<string>) => {
  const { schema, ids } = await seed(5)
  const receiver: Receiver = await startReceiver(secret)
  try {
    const worker = start(command, args, {
      TIDINGS_PG_URL: pgUrl(),
      TIDINGS_SCHEMA: schema,
      WEBHOOK_URL: receiver.url,
      WEBHOOK_SECRET: secret,
      WEBHOOK_TYPES: "order.*"
    })
    try {
      await waitForOutput(worker, /\[relay\] running/)
      await until(
        "every event delivered",
        () => new Set(receiver.received.map((r) => r.id)).size === ids.length,
        60_000
      )
      await until(
        "every event settled",
        async () => (await statuses(schema)).every((r) => r.status === "published"),
        60_000
      )
    } finally {
      assert.include(stopped, await stopChild(worker), worker.output())
    }
    assert.sameMembers([...new Set(receiver.received.map((r) => r.id))], ids)
    assert.isTrue(receiver.received.every((r) => r.verified), "standardwebhooks accepts every signature")
    assert.match(worker.output(), /\[relay\] stopped \(5 events published\)/)
  } finally {
    await receiver.close()
    await Effect.runPromise(
      SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(
        Effect.provide(pgClientLayer(pgUrl(), 1)),
        Effect.ignore
      )
    )
  }
}

describe("Deno Deploy style (npm specifiers only, no node_modules)", () => {
  it("the import map names every module of the packages (node examples/orders/deploy/importMap.ts regenerates it)", () => {
    assert.strictEqual(fs.readFileSync(ImportMap.file, "utf8"), ImportMap.render())
  })

  it("the entries resolve to the packages' sources and npm: packages, nothing from node_modules", () => {
    for (const entry of ["main.ts", "relay.ts"]) {
      const info = spawnSync(deno, ["info", "--json", ...denoFlags, path.join(deploy, entry)], {
        cwd: work,
        encoding: "utf8",
        timeout: 180_000
      })
      assert.strictEqual(info.status, 0, info.stderr)
      const graph = JSON.parse(info.stdout) as {
        modules: Array<{ specifier: string; local?: string; kind?: string }>
        npmPackages: Record<string, unknown>
      }
      const files = graph.modules.filter((m) => m.local !== undefined).map((m) => m.local!)
      assert.isAbove(files.length, 20)
      assert.deepStrictEqual(files.filter((f) => f.includes(`${path.sep}node_modules${path.sep}`)), [], entry)
      assert.includeMembers(
        Object.keys(graph.npmPackages).map((k) => k.replace(/@[^@]*$/, "")),
        ["effect", "postgres"],
        entry
      )
    }
  })

  it("deno run: the orders service's Deno.serve entry serves orders; a saga completes; SIGTERM stops it", async () => {
    const schema = schemaName("deployorders")
    const service = start(deno, ["run", "-A", ...denoFlags, path.join(deploy, "main.ts")], {
      TIDINGS_PG_URL: pgUrl(),
      TIDINGS_SCHEMA: schema,
      TIDINGS_AMQP_URL: "",
      PORT: "0"
    })
    try {
      await waitForOutput(service, /listening on (http:\/\/\S+)/)
      const base = /listening on (http:\/\/\S+)/.exec(service.output())![1]!
      const placed = await fetch(`${base}/orders`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ customer: "ada", sku: "book", quantity: 1, amountCents: 1299 })
      })
      assert.strictEqual(placed.status, 202)
      const { order } = await placed.json() as { order: { id: string } }
      let last: unknown
      await until("the order's saga to complete", async () => {
        last = await (await fetch(`${base}/orders/${order.id}`)).json()
        return (last as { saga: { status: string } }).saga.status === "completed"
      }, 60_000).catch((e) => {
        throw new Error(`${e.message}: ${JSON.stringify(last)}\n${service.output()}`)
      })
      assert.strictEqual((await fetch(`${base}/health`)).status, 200)
    } finally {
      assert.include(stopped, await stopChild(service), service.output())
      await Effect.runPromise(
        SqlClient.SqlClient.use((sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(
          Effect.provide(pgClientLayer(pgUrl(), 1)),
          Effect.ignore
        )
      )
    }
    assert.match(service.output(), /\[orders\] stopped/)
    // Serve.denoHandler: Deno's legacy abort-after-response never reaches the app (nor warns).
    assert.notInclude(service.output(), "request.signal aborts")
  })

  it(
    "deno run: the relay worker delivers the outbox as signed webhooks",
    () => relays(deno, ["run", "-A", ...denoFlags, path.join(deploy, "relay.ts")]),
    240_000
  )

  it("one binary: the relay worker compiled (bun build --compile) delivers the outbox as signed webhooks", async () => {
    const binary = path.join(work, "tidings-relay")
    const built = spawnSync(bun, ["build", "--compile", path.join(deploy, "relay.ts"), "--outfile", binary], {
      cwd: root,
      encoding: "utf8",
      timeout: 180_000
    })
    assert.strictEqual(built.status, 0, built.stderr)
    assert.isTrue(fs.statSync(binary).isFile())
    // Nothing of the repository is needed at run time: it runs from an empty folder.
    await relays(binary, [])
  })
})
