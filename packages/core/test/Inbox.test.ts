import { Effect } from "effect"
import * as InboxStore from "../src/InboxStore.ts"
import * as OutboxStore from "../src/OutboxStore.ts"
import { inboxContract } from "./InboxContract.ts"

inboxContract("memory", Effect.all({ inbox: InboxStore.makeMemory, outbox: OutboxStore.makeMemory }))
