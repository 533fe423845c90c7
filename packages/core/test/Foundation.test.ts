import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, Option, Schema } from "effect"
import * as Errors from "../src/Errors.ts"
import * as Settings from "../src/Settings.ts"
import * as Tracing from "../src/Tracing.ts"

describe("Errors", () => {
  it("one retryability rule: the error's own view, timeouts retryable, anything else permanent", () => {
    assert.isTrue(
      Errors.isRetryable(new Errors.StoreError({ operation: "x", message: "down", reason: new Errors.Unavailable() }))
    )
    assert.isFalse(
      Errors.isRetryable(new Errors.StoreError({ operation: "x", message: "dup", reason: new Errors.Rejected() }))
    )
    assert.isTrue(Errors.isRetryable({ retryable: true }))
    assert.isTrue(Errors.isRetryable(new Cause.TimeoutError()))
    assert.isFalse(Errors.isRetryable(new Error("boom")))
    assert.isFalse(Errors.isRetryable("text"))
  })

  it("unavailability is told apart from a refused message", () => {
    const down = new Errors.PublishError({ message: "not connected", reason: new Errors.Unavailable() })
    const nack = new Errors.PublishError({
      message: "nack",
      reason: new Errors.Refused({ retryable: true, retryAfterMs: 1500 })
    })
    assert.isTrue(Errors.isUnavailable(down))
    assert.isFalse(Errors.isUnavailable(nack))
    assert.isTrue(nack.isRetryable)
    assert.strictEqual(Option.map(nack.retryAfter, Duration.toMillis).pipe(Option.getOrNull), 1500)
    assert.isTrue(Option.isNone(down.retryAfter))
    assert.isFalse(new Errors.PublishError({ message: "too big", reason: new Errors.Invalid() }).isRetryable)
  })

  it("errors survive an encode/decode round trip with their reason", () => {
    const error = new Errors.StoreError({ operation: "claim", message: "deadlock", reason: new Errors.Contention() })
    const decoded = Schema.decodeUnknownSync(Errors.StoreError)(Schema.encodeSync(Errors.StoreError)(error))
    assert.strictEqual(decoded.reason._tag, "Contention")
    assert.isTrue(decoded.isRetryable)
  })

  it("socket codes of a peer that may come back, and only those", () => {
    for (const code of ["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "ENOTFOUND", "EAI_AGAIN"]) {
      assert.isTrue(Errors.isTransientSocketCode(code), code)
    }
    for (const code of ["ERR_TLS_CERT_ALTNAME_INVALID", "DEPTH_ZERO_SELF_SIGNED_CERT", "EACCES", "econnrefused"]) {
      assert.isFalse(Errors.isTransientSocketCode(code), code)
    }
  })

  it("describe and describeCause give one line", () => {
    assert.strictEqual(
      Errors.describe(new Errors.InvalidConfig({ path: "lease", message: "must be positive" })),
      "InvalidConfig: must be positive"
    )
    assert.strictEqual(Errors.describe(new TypeError("bad")), "TypeError: bad")
    assert.strictEqual(Errors.describe(new Error("plain")), "plain")
    assert.strictEqual(Errors.describe("x".repeat(3000)).length, 2001)
    assert.strictEqual(
      Errors.describeCause(Cause.fail(new Errors.NotInTransaction({ message: "no tx" }))),
      "NotInTransaction: no tx"
    )
    assert.strictEqual(Errors.describeCause(Cause.die(new RangeError("oops"))), "RangeError: oops")
    assert.strictEqual(Errors.describeCause(Cause.interrupt()), "interrupted")
  })
})

describe("Settings", () => {
  const Options = Schema.Struct({
    lease: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>("30 seconds"))),
    pollMin: Settings.duration({ allowZero: true }).pipe(Schema.withDecodingDefault(Effect.succeed<Duration.Input>(0))),
    batchSize: Settings.int(1, 10_000).pipe(Schema.withDecodingDefault(Effect.succeed(100))),
    ordering: Schema.Literals(["unordered", "per-key"]).pipe(
      Schema.withDecodingDefault(Effect.succeed("unordered" as const))
    )
  })

  it.effect("applies defaults and accepts what users write", () =>
    Effect.gen(function*() {
      const d = yield* Settings.decode(Options, {})
      assert.strictEqual(Duration.toMillis(d.lease), 30_000)
      assert.strictEqual(d.batchSize, 100)
      const e = yield* Settings.decode(Options, { lease: "5 seconds", pollMin: 0, batchSize: 7, ordering: "per-key" })
      assert.deepStrictEqual([Duration.toMillis(e.lease), Duration.toMillis(e.pollMin), e.batchSize, e.ordering], [
        5000,
        0,
        7,
        "per-key"
      ])
      const f = yield* Settings.decode(Options, { lease: Duration.seconds(2) })
      assert.strictEqual(Duration.toMillis(f.lease), 2000)
    }))

  it.effect("names every wrong setting in one InvalidConfig", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(
        Settings.decode(Options, { lease: 0, batchSize: 0.5, ordering: "random" }, "relay")
      )
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? Option.getOrThrow(Cause.findErrorOption(exit.cause)) : undefined
      assert.strictEqual(error?._tag, "InvalidConfig")
      assert.deepStrictEqual(error?.issues?.map((i) => i.path), ["relay.lease", "relay.batchSize", "relay.ordering"])
      assert.include(error?.message ?? "", "relay.batchSize: must be an integer from 1 to 10000, got 0.5")
      assert.strictEqual(error?.path, "relay.lease")
      assert.throws(() => Settings.decodeSync(Options, { lease: "soon" }), /duration/)
    }))
})

describe("Tracing", () => {
  it("parses and formats W3C traceparent, ignoring malformed values", () => {
    const header = "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01 "
    const span = Tracing.parseTraceparent(header)
    assert.strictEqual(span?.traceId, "0af7651916cd43dd8448eb211c80319c")
    assert.strictEqual(span?.spanId, "b7ad6b7169203331")
    assert.isTrue(span?.sampled)
    assert.strictEqual(Tracing.formatTraceparent(span!), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    for (
      const bad of [
        undefined,
        42,
        "",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "01-abc",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"
      ]
    ) {
      assert.isUndefined(Tracing.parseTraceparent(bad))
    }
    assert.strictEqual(Tracing.parentFromHeaders({ traceparent: header })?.spanId, "b7ad6b7169203331")
  })

  it.effect("the current span's traceparent", () =>
    Effect.gen(function*() {
      assert.isTrue(Option.isNone(yield* Tracing.currentTraceparent))
      const inner = yield* Tracing.currentTraceparent.pipe(Effect.withSpan("outer"))
      assert.match(Option.getOrThrow(inner), /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/)
    }))
})
