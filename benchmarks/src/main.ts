/**
 * `npm run bench -- [suite|claim|latency|publish] [--json] [--quick] [filters]`: the Tidings benchmarks.
 * Without a benchmark name, the whole suite (`suite.ts`) runs and writes its report.
 * Tables and progress go to stderr; with `--json`, stdout gets exactly one JSON object.
 * @module
 */
import * as EagerDispatch from "@tidings/core/EagerDispatch"
import { Cause, Effect, Exit, Fiber, References, type Scope } from "effect"
import * as Claim from "./claim.ts"
import * as Latency from "./latency.ts"
import { parse, Reader, UsageError } from "./lib/cli.ts"
import { log } from "./lib/report.ts"
import { writeStdout } from "./lib/stdio.ts" // first: keeps stray console output off stdout
import * as Publish from "./publish.ts"
import * as Suite from "./suite.ts"

const usage = `usage: npm run bench -- [suite|claim|latency|publish] [--json] [--quick] [options]

  suite     (the default) everything below on one embedded PostgreSQL (+ RabbitMQ when available),
            every figure the median of 3 runs, Tidings beside graphile-worker and pg-boss; writes
            benchmarks/results/<date>.json, latest.json, <date>.md + SVG charts, and (full runs) the
            results section of benchmarks/README.md. Full ~15 min on 2 cores; --quick < 3 min.
            --phase claim,latency,bloat,scale,consumer,e2e  --runs 3  --events N (claim rows; 40000, quick 5000)
            (log mode runs in claim, latency and scale; consumer: PgLogConsumer vs the inbox over RabbitMQ;
            e2e: a backlog into RabbitMQ by Tidings, graphile-worker and pg-boss, then paced log-mode runs)
            --bloat-rows N (1000000, quick 50000)  --rabbit auto|off  --dry-run (write nothing)

  claim     events claimed + marked published per second (ceiling, Tidings relay, hand-written SQL loop)
            --relays 1,4,8,16  --batch 1,10,100,500  --ordering unordered,per-key,sql-loop[,unordered-sync,unordered-no-coalesce,log]  --table clean,dirty
            (log: LogRelay on a log of 16 partitions; relays = its workers, batch = events per partition and read)
            --events N (pending rows per run; 50000, quick 10000)  --cap S (seconds per run; 15, quick 2)
            --driver process-batch|layer (how the relay runs: Relay.processBatch loops, or Relay.layer's pollers)
  latency   append-commit → publish latency under paced load, wake-ups by NOTIFY vs polling only;
            append-commit → RabbitMQ confirm and → consumer handler, classic and quorum queues
            --transport memory,rabbitmq  --rates 200,1000 (rabbitmq: 200,1000,2000)  --duration S (15, quick 5)
            --wakeup notify,poll[,local] (rabbitmq: local)  --relays 4  --producers 16  --batch 100
            --notify coalesced|in-transaction (how the store sends its NOTIFY in notify mode)
            --queue classic,quorum  --relay tidings[,naive,direct,publisher,pipelined]  --channels 1 (AmqpPublisher confirm channels)
            --consumer-concurrency 64  --prefetch 512
  publish   outbox → RabbitMQ throughput (Relay.layer + AmqpPublisher) beside raw amqplib, saturated commit → confirm
            --events N (50000, quick 20000)  --relays 4  --batch 1000  --channels 1 (lists: every combination is run)
            --rounds N (2, quick 1)  --phase throughput,saturated,loaded  --seconds S (runs under load; 10, quick 4)
            --loaded-rate N (events/s; default 80% of what the relays confirmed while saturated)
            --producers 16  --tx-events 10 (runs under load: producer fibers, events per transaction)
            --eager-limit N  --backpressure MS (runs under load: eager dispatch's limit; producer flow control, off by default)
            --transport webhooks: outbox → webhooks (Relay.layer + WebhookPublisher) into a local receiver beside plain
            fetch loops with as many requests in flight; --events N (20000, quick 5000)  --relays 4  --batch 100
            --concurrency 64 (requests in flight; lists: every combination)  --rounds N (3, quick 1)

  --json    print one JSON object with the results on stdout
  --quick   smaller counts and shorter runs (a check that finishes in under 3 minutes)`

const commands = {
  suite: (args: Reader, argv: ReadonlyArray<string>) => {
    const opts = Suite.options(args, argv)
    return () => Suite.run(opts)
  },
  claim: (args: Reader) => {
    const opts = Claim.options(args)
    return () => Claim.run(opts)
  },
  latency: (args: Reader) => {
    const opts = Latency.options(args)
    return () => Latency.run(opts)
  },
  publish: (args: Reader) => {
    const opts = Publish.options(args)
    return () => Publish.run(opts)
  }
} as const

/** What a command line asks for: help, or a benchmark with its options. Throws `UsageError`. */
export const command = (argv: ReadonlyArray<string>):
  | { readonly _tag: "help" }
  | {
    readonly _tag: "run"
    readonly name: string
    readonly json: boolean
    readonly program: () => Effect.Effect<unknown, never, Scope.Scope>
  } =>
{
  const flags = parse(argv)
  const args = new Reader(flags)
  if (args.bool("help") || args.bool("h")) return { _tag: "help" }
  const name = flags.positional[0] ?? "suite"
  if (!(name in commands) || flags.positional.length > 1) {
    throw new UsageError(`unknown benchmark ${flags.positional.join(" ")}`)
  }
  const json = args.bool("json")
  const program = commands[name as keyof typeof commands](args, argv)
  args.rejectUnknown()
  return { _tag: "run", name, json, program }
}

const main = async (): Promise<number> => {
  let program: () => Effect.Effect<unknown, never, Scope.Scope>
  let json: boolean
  try {
    const parsed = command(process.argv.slice(2))
    if (parsed._tag === "help") {
      log(usage)
      return 0
    }
    // The docs test checks the README's benchmark commands this way: they would run for minutes.
    if (process.env["TIDINGS_BENCH_CHECK_ARGS"] === "1") {
      log(`arguments ok: ${parsed.name}${parsed.json ? " (json)" : ""}`)
      return 0
    }
    program = parsed.program
    json = parsed.json
  } catch (error) {
    if (!(error instanceof UsageError)) throw error
    log(`error: ${error.message}\n\n${usage}`)
    return 2
  }

  const fiber = Effect.runFork(
    program().pipe(
      Effect.scoped,
      // Effect's loggers (relay warnings) write to stderr like everything else.
      Effect.provideService(References.LogToStderr, true),
      // Eager dispatch pairs the producers and relays of one store: the benchmarks provide their
      // stores as values, so they provide the registry (a store's layer would bring its own).
      Effect.provideService(EagerDispatch.Lanes, EagerDispatch.make())
    )
  )
  // Ctrl-C: interrupt, so that finalizers stop the embedded server and drop schemas.
  const interrupt = () => void Effect.runFork(Fiber.interrupt(fiber))
  process.once("SIGINT", interrupt)
  process.once("SIGTERM", interrupt)
  const exit = await Effect.runPromise(Fiber.await(fiber))
  if (Exit.isFailure(exit)) {
    log(Cause.hasInterruptsOnly(exit.cause) ? "interrupted" : Cause.pretty(exit.cause))
    return Cause.hasInterruptsOnly(exit.cause) ? 130 : 1
  }
  if (json) await writeStdout(`${JSON.stringify(exit.value)}\n`)
  return typeof process.exitCode === "number" ? process.exitCode : 0
}

if (import.meta.main === true || process.argv[1] === import.meta.filename) process.exitCode = await main()
