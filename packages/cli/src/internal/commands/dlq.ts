/** `tidings dlq list | replay`: RabbitMQ dead-letter queues. */
import * as DeadLetters from "@tidings/rabbitmq/DeadLetters"
import { Effect, Layer } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Out from "../output.ts"
import { brokerLayer, settings, type Subcommand } from "../root.ts"

const queues = Flag.String("queue").pipe(
  Flag.atLeast(1),
  Flag.withDescription("A consumer's work queue (its dead-letter queue is <queue>.dlq); repeat for several")
)

const withDeadLetters = <A, E, R>(names: ReadonlyArray<string>, effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.provide(DeadLetters.layer({ queues: names }).pipe(Layer.provide(brokerLayer("tidings-cli")))))

const list = Command.make("list", { queues }, (f) =>
  withDeadLetters(
    f.queues,
    Effect.gen(function*() {
      const s = yield* settings
      const found = yield* DeadLetters.DeadLetters.use((d) => d.list)
      if (s.json) return yield* Out.json(found)
      yield* Out.table(
        ["dead-letter queue", "messages", "replays into", "consumers"],
        found.map((q) => [q.name, q.messages, q.target, q.consumers])
      )
    })
  )).pipe(Command.withDescription("The dead-letter queues with their message counts"))

const replay = Command.make("replay", {
  queue: Argument.String("queue").pipe(Argument.withDescription("The dead-letter queue (or its work queue)")),
  limit: Flag.Int("limit").pipe(Flag.optional, Flag.withDescription("At most this many messages (default: all)"))
}, (f) =>
  withDeadLetters(
    [f.queue.replace(/\.dlq$/, "")],
    Effect.gen(function*() {
      const s = yield* settings
      const bar = yield* Out.progress("replaying")
      const replayed = yield* DeadLetters.DeadLetters.use((d) =>
        d.replay(f.queue, { ...(f.limit._tag === "Some" ? { limit: f.limit.value } : {}), onProgress: bar.report })
      )
      yield* bar.end
      if (s.json) return yield* Out.json({ replayed })
      yield* Out.line(`replayed ${replayed} message${replayed === 1 ? "" : "s"} into ${f.queue.replace(/\.dlq$/, "")}`)
    })
  )).pipe(
    Command.withDescription(
      "Moves dead-lettered messages back to their work queue (confirmed, one at a time), with a progress bar"
    )
  )

/** `tidings dlq ...` */
export const command: Subcommand<"dlq"> = Command.make("dlq").pipe(
  Command.withSubcommands([list, replay]),
  Command.withDescription("RabbitMQ dead-letter queues: list and replay")
)
