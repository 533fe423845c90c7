import { outboxStoreContract } from "../../core/test/OutboxStoreContract.ts"
import { makePgStore, pgClientLayer, sqlPgLayer } from "../../../test/support/pg.ts"

// The Postgres store passes the same contract as the memory store, on our postgres.js client and on
// @effect/sql-pg's (the stores depend only on effect/sql's SqlClient).
outboxStoreContract("postgres via PgClient (postgres.js)", makePgStore(pgClientLayer()))
outboxStoreContract("postgres via @effect/sql-pg", makePgStore(sqlPgLayer()))
