/**
 * The contract every `Publisher` passes: one result per message, `Published` only for what the
 * broker took (confirmed-only counting), refusals as typed `PublishError`s that are not
 * unavailability, and an outage reported as unavailability (with `awaitAvailable` waiting until the
 * broker is back). Run here against `MemoryBroker`'s publisher and in `@tidings/rabbitmq` against
 * `AmqpPublisher`; a third-party publisher runs it too (see docs/writing-a-driver.md).
 * @since 0.1.0
 * @module
 */
import { assert, describe } from "@effect/vitest"
import { Clock, Effect, Exit, Fiber, Option, Schema, type Scope } from "effect"
import * as Errors from "../Errors.ts"
import * as Event from "../Event.ts"
import type { Message } from "../Message.ts"
import * as Outbox from "../Outbox.ts"
import type { PublishResult, Service as Publisher } from "../Publisher.ts"
import { draft } from "./helpers.ts"
import { type ContractOptions, timeOf } from "./OutboxStoreContract.ts"

/**
 * What the publisher contract needs from a publisher's test setup.
 * @since 0.1.0
 * @category models
 */
export interface PublisherHarness {
  /** The publisher under test. */
  readonly publisher: Publisher
  /** Ids of the messages the broker received (to check that `Published` means received). */
  readonly received: Effect.Effect<ReadonlyArray<string>>
  /** Messages of this event type are refused by the broker (unroutable, too large, ...); omit to skip that case. */
  readonly refusedType?: string
  /** Takes the broker away (`false`) and brings it back (`true`); omit to skip the outage case. */
  readonly setAvailable?: (available: boolean) => Effect.Effect<void>
}

const Refusable = (type: string) =>
  Event.define(type, { aggregateType: "thing", schema: Schema.Struct({ n: Schema.Int, label: Schema.String }) })

const messagesOf = (count: number, refusedType?: string) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    return yield* Effect.forEach(Array.from({ length: count }), (_, n) =>
      Outbox.encode(
        refusedType !== undefined && n % 3 === 1
          ? Refusable(refusedType).make({ aggregateId: `a${n}`, payload: { n, label: "refused" } })
          : draft(n),
        now,
        Option.none()
      ))
  })

const assertOneResultEach = (messages: ReadonlyArray<Message>, results: ReadonlyArray<PublishResult>) => {
  const ids = results.map((r) => r.id)
  assert.strictEqual(new Set(ids).size, ids.length, "no message has two results")
  assert.deepStrictEqual([...ids].sort(), messages.map((m) => m.id).sort(), "one result per message, with its id")
}

/**
 * Registers the publisher contract for a harness built fresh for each test (in the test's scope).
 * @since 0.1.0
 * @category contracts
 */
export const publisherContract = (
  name: string,
  makeHarness: Effect.Effect<PublisherHarness, unknown, Scope.Scope>,
  options: ContractOptions = {}
): void => {
  const { test, time } = timeOf(options)
  const run = <A, E>(body: (harness: PublisherHarness) => Effect.Effect<A, E>) =>
    Effect.scoped(Effect.flatMap(Effect.orDie(makeHarness), body))

  describe(`Publisher contract: ${name}`, () => {
    test("every message of a batch gets exactly one result with its id; what is Published was received", () =>
      run(({ publisher, received }) =>
        Effect.gen(function*() {
          const messages = yield* messagesOf(25)
          const results = yield* publisher.publish(messages)
          assertOneResultEach(messages, results)
          assert.isTrue(
            results.every((r) => r._tag === "Published"),
            "a broker that accepts everything confirms everything"
          )
          const got = new Set(yield* received)
          for (const m of messages) assert.isTrue(got.has(m.id), `${m.id} was reported published and received`)
          assert.deepStrictEqual(yield* publisher.publish([]), [], "an empty batch publishes nothing")
        })
      ))

    test("a refused message is Rejected with a PublishError that is not unavailability; the rest of its batch is published", () =>
      run(({ publisher, received, refusedType }) =>
        Effect.gen(function*() {
          if (refusedType === undefined) return
          const messages = yield* messagesOf(9, refusedType)
          const results = yield* publisher.publish(messages)
          assertOneResultEach(messages, results)
          const byId = new Map(results.map((r) => [r.id, r]))
          const got = new Set(yield* received)
          for (const m of messages) {
            const result = byId.get(m.id)!
            if (m.type === refusedType) {
              assert.strictEqual(result._tag, "Rejected", `${m.type} is refused`)
              if (result._tag === "Rejected") {
                assert.strictEqual(result.error._tag, "PublishError")
                assert.isFalse(Errors.isUnavailable(result.error), "a refusal is not an outage")
              }
            } else {
              assert.strictEqual(result._tag, "Published")
              assert.isTrue(got.has(m.id))
            }
          }
        })
      ))

    test("while the broker is unavailable, publishing fails as unavailability (never Published) and awaitAvailable waits; once it is back, both go on", () =>
      run(({ publisher, setAvailable }) =>
        Effect.gen(function*() {
          if (setAvailable === undefined) return
          yield* setAvailable(false)
          const messages = yield* messagesOf(3)
          const waiting = publisher.awaitAvailable === undefined
            ? undefined
            : yield* Effect.forkChild(publisher.awaitAvailable)
          const down = yield* Effect.exit(time.run(publisher.publish(messages).pipe(Effect.timeout("10 seconds"))))
          if (Exit.isFailure(down)) {
            const error = Option.getOrUndefined(Exit.findErrorOption(down))
            assert.isTrue(Errors.isUnavailable(error), `the batch failed as unavailable: ${Errors.describe(error)}`)
          } else {
            assertOneResultEach(messages, down.value)
            for (const r of down.value) {
              assert.isTrue(
                r._tag === "Rejected" && Errors.isUnavailable(r.error),
                "each message failed as unavailable"
              )
            }
          }
          if (waiting !== undefined) {
            assert.isUndefined(waiting.pollUnsafe(), "awaitAvailable waits while the broker is away")
          }
          yield* setAvailable(true)
          if (waiting !== undefined) yield* time.run(Fiber.join(waiting).pipe(Effect.timeout("10 seconds")))
          // A driver may need a moment to reconnect after it says it is back.
          yield* time.eventually(
            publisher.publish(messages).pipe(
              Effect.map((rs) => rs.length === messages.length && rs.every((r) => r._tag === "Published")),
              Effect.catch(() => Effect.succeed(false))
            ),
            "10 seconds",
            "publishing after the broker came back"
          )
        })
      ))
  })
}
