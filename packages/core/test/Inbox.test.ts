import { inboxContract } from "@tidings/core/testing"
import { Effect } from "effect"
import * as MemoryInboxStore from "../src/MemoryInboxStore.ts"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"

inboxContract("memory", Effect.all({ inbox: MemoryInboxStore.make, outbox: MemoryOutboxStore.make }), { clock: "test" })
