import { relayContract } from "../../core/test/RelayContract.ts"
import { makePgStore, pgClientLayer } from "../../../test/support/pg.ts"

relayContract("postgres", makePgStore(pgClientLayer()))
