import * as OutboxStore from "../src/OutboxStore.ts"
import { relayContract } from "./RelayContract.ts"

relayContract("memory", OutboxStore.makeMemory)
