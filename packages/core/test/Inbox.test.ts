import { Effect } from "effect"
import * as InboxStore from "../src/InboxStore.ts"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"
import { inboxContract } from "./InboxContract.ts"

inboxContract("memory", Effect.all({ inbox: InboxStore.makeMemory, outbox: MemoryOutboxStore.make }))
