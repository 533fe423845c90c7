import * as OutboxStore from "../src/OutboxStore.ts"
import { outboxStoreContract } from "./OutboxStoreContract.ts"

outboxStoreContract("memory", OutboxStore.makeMemory)
