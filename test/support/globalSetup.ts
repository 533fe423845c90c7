/**
 * Vitest global setup: one PostgreSQL server (embedded, or `TIDINGS_PG_URL`) and one RabbitMQ broker
 * (a private node, or `TIDINGS_AMQP_URL`) for the whole run, started in parallel and stopped at the
 * end even when tests fail. Test files isolate themselves with a schema / unique queue names each.
 */
import type { TestProject } from "vitest/node"
import { startPostgres } from "./embeddedPostgres.ts"
import { startRabbit } from "./rabbitmq.ts"

declare module "vitest" {
  export interface ProvidedContext {
    pgUrl: string
    amqpUrl: string
  }
}

export default async function setup(project: TestProject) {
  const [pg, rabbit] = await Promise.allSettled([startPostgres(), startRabbit()])
  if (pg.status === "rejected" || rabbit.status === "rejected") {
    // Never leave one server behind because the other failed.
    if (pg.status === "fulfilled") await pg.value.stop()
    if (rabbit.status === "fulfilled") await rabbit.value.stop()
    throw pg.status === "rejected" ? pg.reason : (rabbit as PromiseRejectedResult).reason
  }
  project.provide("pgUrl", pg.value.url)
  project.provide("amqpUrl", rabbit.value.url)
  // Child processes spawned by tests (multi-process relays) read the URLs from the environment.
  process.env["TIDINGS_TEST_PG_URL"] = pg.value.url
  process.env["TIDINGS_TEST_AMQP_URL"] = rabbit.value.url
  if (process.env["TIDINGS_TEST_VERBOSE"] !== undefined) {
    console.log(`RabbitMQ: ${rabbit.value.external ? "external" : "private node"}, install ${rabbit.value.timings.installMs} ms, start ${rabbit.value.timings.startMs} ms`)
  }
  return async () => {
    await Promise.all([pg.value.stop(), rabbit.value.stop()])
  }
}
