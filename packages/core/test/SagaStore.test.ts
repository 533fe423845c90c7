import { sagaStoreContract } from "@tidings/core/testing"
import * as MemorySagaStore from "../src/MemorySagaStore.ts"

// The memory store reads Effect's Clock: the suite runs on TestClock, without waiting.
sagaStoreContract("memory", MemorySagaStore.make, { clock: "test" })
