import { relayContract } from "@tidings/core/testing"
import { makePgStore, pgClientLayer } from "../../../test/support/pg.ts"

relayContract("postgres", makePgStore(pgClientLayer()))
