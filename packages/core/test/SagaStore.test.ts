import * as MemorySagaStore from "../src/MemorySagaStore.ts"
import { sagaStoreContract } from "@tidings/core/testing"

// The memory store reads Effect's Clock: the suite runs on TestClock, without waiting.
sagaStoreContract("memory", MemorySagaStore.make, { clock: "test" })
