import { assert, describe, it } from "@effect/vitest"
import { InvalidConfig } from "@tidings/core/Errors"
import { ConfigProvider, Effect, Exit, Layer, Redacted } from "effect"
import * as Auth from "../src/Auth.ts"
import * as Serve from "../src/Serve.ts"

const env = (vars: Record<string, string>) => ConfigProvider.layer(ConfigProvider.fromEnv({ env: vars }))

const invalidOf = <A, E>(exit: Exit.Exit<A, E>): InvalidConfig => {
  assert.isTrue(Exit.isFailure(exit))
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined
  assert.instanceOf(error, InvalidConfig)
  return error as InvalidConfig
}

describe("HTTP settings from the environment", () => {
  it.live("Serve.layerConfig listens where TIDINGS_HTTP_* say, while the layer lives", () =>
    Effect.gen(function*() {
      const app = () => new Response("hello")
      const url = yield* Effect.scoped(
        Effect.gen(function*() {
          const server = yield* Serve.Listening
          assert.strictEqual(server.hostname, "127.0.0.1")
          const text = yield* Effect.promise(() => fetch(server.url).then((r) => r.text()))
          assert.strictEqual(text, "hello")
          return server.url
        }).pipe(
          Effect.provide(
            Serve.layerConfig(app).pipe(
              Layer.provide(env({ TIDINGS_HTTP_PORT: "0", TIDINGS_HTTP_GRACE_PERIOD_MS: "100" }))
            )
          )
        )
      )
      // Closed with the layer.
      const after = yield* Effect.promise(() => fetch(url).then(() => "open", () => "closed"))
      assert.strictEqual(after, "closed")
      const error = invalidOf(
        yield* Effect.exit(
          Serve.config().pipe(Effect.provide(env({ TIDINGS_HTTP_PORT: "70000", TIDINGS_HTTP_GRACE_PERIOD_MS: "-1" })))
        )
      )
      assert.deepStrictEqual(error.issues!.map((i) => i.path), ["TIDINGS_HTTP_PORT", "TIDINGS_HTTP_GRACE_PERIOD_MS"])
    }))

  it.effect("Auth.layerConfig: TIDINGS_ADMIN_TOKEN as a secret, checked; absent keeps the admin routes closed", () =>
    Effect.gen(function*() {
      const token = "0123456789abcdef0123456789abcdef-token"
      const given = yield* Auth.AdminToken.pipe(
        Effect.provide(Auth.layerConfig().pipe(Layer.provide(env({ TIDINGS_ADMIN_TOKEN: token }))))
      )
      assert.isTrue(Redacted.isRedacted(given.token))
      assert.strictEqual(Redacted.value(given.token!), token)
      const none = yield* Auth.AdminToken.pipe(Effect.provide(Auth.layerConfig().pipe(Layer.provide(env({})))))
      assert.isUndefined(none.token)
      const error = invalidOf(
        yield* Effect.exit(Auth.config().pipe(Effect.provide(env({ TIDINGS_ADMIN_TOKEN: "short-Secret" }))))
      )
      assert.deepStrictEqual(error.issues!.map((i) => i.path), ["TIDINGS_ADMIN_TOKEN"])
      assert.notInclude(error.message, "short-Secret")
    }))
})
