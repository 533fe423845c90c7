import { outboxStoreContract } from "@tidings/core/testing"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"

// The memory store reads `Clock`: its leases, retry delays and retention run on `TestClock`.
outboxStoreContract("memory", MemoryOutboxStore.make, { clock: "test" })
