/**
 * On PostgreSQL, an idle relay (four pollers, with its lease reclaimer and stats loops) emits no
 * span at all while it polls, neither its own nor the SQL client's; the first claim that finds an
 * event does.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Event from "@tidings/core/Event"
import * as MemoryBroker from "@tidings/core/MemoryBroker"
import * as Outbox from "@tidings/core/Outbox"
import { OutboxStore } from "@tidings/core/OutboxStore"
import * as Relay from "@tidings/core/Relay"
import { eventually } from "@tidings/core/testing"
import { Effect, Exit, Layer, Schema, Scope, Tracer } from "effect"
import { makePgStore, pgClientLayer, pgUrl } from "../../../test/support/pg.ts"

const Pinged = Event.define("ping", { aggregateType: "ping", schema: Schema.Struct({ n: Schema.Int }) })

describe("PostgreSQL relay tracing", () => {
  it.live("an idle relay polls without emitting spans; the claim that finds an event records one", () =>
    Effect.gen(function*() {
      const spans: Array<Tracer.NativeSpan> = []
      const tracer = Tracer.make({ span: (options) => (spans.push(new Tracer.NativeSpan(options)), spans.at(-1)!) })
      const inner = yield* makePgStore(pgClientLayer(pgUrl(), 6))
      // Counts the claim statements: the relay's polls, to wait for many of them (a state, not a time).
      let claims = 0
      const store = OutboxStore.of({
        ...inner,
        claim: (options) => Effect.suspend(() => (claims++, inner.claim(options))),
        settleAndClaim: (holder, settlement, options) =>
          Effect.suspend(() => (claims++, inner.settleAndClaim(holder, settlement, options)))
      })
      // Built after the store, so closed before it (the test's scope closes in reverse order).
      const scope = yield* Scope.make()
      yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
      const context = yield* Layer.buildWithScope(
        Relay.layer({
          concurrency: 4,
          dispatch: "poll",
          coalesceClaims: false,
          pollInterval: { base: "10 millis", max: "20 millis" },
          lease: "2 seconds",
          statsInterval: "50 millis"
        })
          .pipe(Layer.provideMerge(Layer.mergeAll(Layer.succeed(OutboxStore, store), MemoryBroker.layer()))),
        scope
      ).pipe(Effect.provideService(Tracer.Tracer, tracer))
      yield* eventually(Effect.sync(() => claims >= 40), "60 seconds", "40 empty claims")
      assert.deepStrictEqual(spans.map((s) => s.name), [], `${claims} empty claims, no span`)

      yield* store.withTransaction(Outbox.append(Pinged, { aggregateId: "p", payload: { n: 1 } })).pipe(
        Effect.provideService(OutboxStore, store),
        Effect.withTracerEnabled(false)
      )
      yield* eventually(
        MemoryBroker.MemoryBroker.use((b) => Effect.map(b.delivered, (d) => d.length === 1)).pipe(
          Effect.provideContext(context)
        ),
        "30 seconds",
        "the delivery"
      )
      yield* eventually(
        Effect.sync(() => spans.some((s) => s.name === "settle outbox" && s.status._tag === "Ended")),
        "30 seconds",
        "the settle span"
      )
      yield* Scope.close(scope, Exit.void)
      const names = spans.map((s) => s.name)
      assert.strictEqual(names.filter((n) => n === "receive outbox").length, 1, names.join(", "))
      assert.includeMembers(names, ["send memory", "settle outbox"])
    }).pipe(Effect.scoped))
})
