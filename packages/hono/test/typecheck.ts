/**
 * Compile-time checks (type-checked by `tsc -b`, never run): the routes and checks require the
 * services they use from the runtime.
 */
import * as Health from "@tidings/core/Health"
import type { OutboxStore } from "@tidings/core/OutboxStore"
import type { Relay } from "@tidings/core/Relay"
import { SagaStore } from "@tidings/core/SagaStore"
import * as PgClient from "@tidings/postgres/PgClient"
import { Effect, Schema } from "effect"
import * as Command from "../src/Command.ts"
import * as Routes from "../src/Routes.ts"
import type { Runtime } from "../src/Runtime.ts"

declare const outboxOnly: Runtime<OutboxStore>
declare const full: Runtime<OutboxStore | SagaStore | Relay>

export const ok = [
  Routes.outbox(outboxOnly),
  Routes.sagas(full),
  Routes.health(full, { checks: [Health.relay, Health.up("memory")] }),
  Routes.all(outboxOnly),
  Command.handler(outboxOnly, { body: Schema.Struct({ a: Schema.String }) }, ({ body }) => Effect.succeed(body.a))
]

export const rejected = [
  // @ts-expect-error the runtime provides no SagaStore
  Routes.sagas(outboxOnly),
  // @ts-expect-error the runtime provides no Relay
  Routes.health(outboxOnly, { checks: [Health.relay] }),
  // @ts-expect-error the runtime provides no SqlClient
  Routes.health(full, { checks: [PgClient.readiness] }),
  // @ts-expect-error the handler needs a SagaStore the runtime does not provide
  Command.handler(outboxOnly, {}, () => Effect.asVoid(Effect.service(SagaStore)))
]
