import { publisherContract } from "@tidings/core/testing"
import { Context, Effect, Layer } from "effect"
import { PublishError, Refused } from "../src/Errors.ts"
import * as MemoryBroker from "../src/MemoryBroker.ts"
import { Publisher } from "../src/Publisher.ts"

// MemoryBroker's publisher: messages of type "refused.thing" are refused, and `setAvailable` takes
// the broker away.
publisherContract(
  "MemoryBroker",
  Effect.gen(function*() {
    const context = yield* Layer.build(MemoryBroker.layer({
      fault: (m) =>
        m.type === "refused.thing"
          ? new PublishError({ message: "unroutable", reason: new Refused({ retryable: false }) })
          : undefined
    }))
    const broker = Context.get(context, MemoryBroker.MemoryBroker)
    return {
      publisher: Context.get(context, Publisher),
      received: Effect.map(broker.delivered, (ds) => ds.map((d) => d.message.id)),
      refusedType: "refused.thing",
      setAvailable: broker.setAvailable
    }
  }),
  { clock: "test" }
)
