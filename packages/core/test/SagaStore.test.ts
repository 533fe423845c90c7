import * as SagaStore from "../src/SagaStore.ts"
import { sagaStoreContract } from "./SagaStoreContract.ts"

sagaStoreContract("memory", SagaStore.makeMemory)
