import { relayContract } from "@tidings/core/testing"
import * as MemoryOutboxStore from "../src/MemoryOutboxStore.ts"

// On `TestClock`: polls, backoffs, leases, outages and shutdown deadlines pass in simulated time.
relayContract("memory", MemoryOutboxStore.make, { clock: "test" })
