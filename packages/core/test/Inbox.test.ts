import { inboxContract } from "@tidings/core/testing"
import { Effect } from "effect"
import * as MemoryInboxStore from "../src/MemoryInboxStore.ts"
import * as OutboxStore from "../src/OutboxStore.ts"

inboxContract("memory", Effect.all({ inbox: MemoryInboxStore.make, outbox: OutboxStore.makeMemory }), { clock: "test" })
