import { Duration, Effect, Schema } from "effect"
import * as Settings from "./src/Settings.ts"
const S = Schema.Struct({
  lease: Settings.duration().pipe(Schema.withDecodingDefault(Effect.succeed("30 seconds" as Duration.Input))),
  min: Settings.duration({ allowZero: true }).pipe(Schema.withDecodingDefault(Effect.succeed(0 as Duration.Input))),
  batchSize: Settings.int(1, 10000).pipe(Schema.withDecodingDefault(Effect.succeed(100))),
  ordering: Schema.Literals(["unordered", "per-key"]).pipe(Schema.withDecodingDefault(Effect.succeed("unordered" as const))),
  nested: Schema.optional(Schema.Struct({ olderThan: Settings.duration() }))
})
console.log(Effect.runSync(Settings.decode(S, {})))
console.log(Effect.runSync(Settings.decode(S, { lease: "5 seconds", min: 0, batchSize: 5 })))
const r = Effect.runSyncExit(Settings.decode(S, { lease: -1, batchSize: 0.5, ordering: "x", nested: { olderThan: "abc" } }, "relay"))
console.log(JSON.stringify(r, null, 1))
const r2 = Effect.runSyncExit(Settings.decode(S, { lease: 0 }))
console.log(String(r2))
