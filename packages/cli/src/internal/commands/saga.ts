/** `tidings saga list | show | retry | compensate`. */
import * as Admin from "@tidings/core/Admin"
import { type SagaStatus, SagaStore } from "@tidings/core/SagaStore"
import { Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Out from "../output.ts"
import { SettingError, settings, type Subcommand, withStores } from "../root.ts"

const statuses = ["running", "completed", "compensating", "compensated", "failed"] as const satisfies ReadonlyArray<
  SagaStatus
>

const list = Command.make("list", {
  status: Flag.Literals("status", statuses).pipe(Flag.optional, Flag.withDescription("Only sagas in this status")),
  type: Flag.String("type").pipe(Flag.optional, Flag.withDescription("Only sagas of this definition")),
  limit: Flag.Int("limit").pipe(Flag.withDefault(50))
}, (f) =>
  withStores(Effect.gen(function*() {
    const s = yield* settings
    const sagas = yield* SagaStore.use((store) =>
      store.list({
        limit: f.limit,
        ...(Option.isSome(f.status) ? { status: f.status.value } : {}),
        ...(Option.isSome(f.type) ? { type: f.type.value } : {})
      })
    )
    if (s.json) return yield* Out.json(sagas)
    yield* Out.table(
      ["id", "type", "status", "step", "error", "created", "updated"],
      sagas.map((g) => [g.id, g.type, g.status, g.currentStep + 1, g.error, g.createdAt, g.updatedAt]),
      { empty: "no sagas" }
    )
  }))).pipe(Command.withDescription("Sagas, most recent first, by status and type"))

const id = Argument.String("id").pipe(Argument.withDescription("The saga id"))

const show = Command.make("show", { id }, (f) =>
  withStores(Effect.gen(function*() {
    const s = yield* settings
    const execution = yield* SagaStore.use((store) => store.load(f.id))
    if (execution === undefined) return yield* new SettingError({ message: `no saga ${f.id}` })
    const timeline = Admin.timeline(execution, Date.now())
    if (s.json) return yield* Out.json({ ...execution, timeline })
    const g = execution.saga
    yield* Out.line(
      `${g.id}  ${g.type}  ${g.status}  (version ${g.version})`,
      ...(g.error === null ? [] : [`error: ${g.error}`]),
      ""
    )
    yield* Out.table(
      ["step", "status", "attempts", "compensations", "started", "finished", "duration", "error"],
      timeline.map((
        e
      ) => [
        `${e.index + 1}. ${e.step}${e.current === null ? "" : ` (${e.current} now)`}`,
        e.status,
        e.attempts,
        e.compensationAttempts,
        e.startedAt,
        e.finishedAt,
        Out.duration(e.durationMs),
        e.error
      ])
    )
    yield* Out.line("", `input: ${JSON.stringify(g.input)}`)
  }))).pipe(Command.withDescription("One saga with its steps as a timeline"))

const action = (
  name: string,
  run: (id: string) => ReturnType<typeof Admin.retrySaga>,
  description: string,
  done: string
) =>
  Command.make(name, { id }, (f) =>
    withStores(Effect.gen(function*() {
      const s = yield* settings
      const saga = yield* run(f.id)
      if (s.json) return yield* Out.json(saga)
      yield* Out.line(`saga ${saga.id} is ${saga.status}: ${done}`)
    }))).pipe(Command.withDescription(description))

/** `tidings saga ...` */
export const command: Subcommand<"saga"> = Command.make("saga").pipe(
  Command.withSubcommands([
    list,
    show,
    action(
      "retry",
      Admin.retrySaga,
      "Retries a failed saga's compensation (the recovery worker carries it out)",
      "the recovery worker compensates it again"
    ),
    action(
      "compensate",
      (i) => Admin.compensateSaga(i),
      "Stops a running saga and has its completed steps undone (by the recovery worker)",
      "the recovery worker undoes its completed steps"
    )
  ]),
  Command.withDescription("Inspect sagas, retry failed compensations, compensate running sagas")
)
