/**
 * The test servers of one vitest run, started lazily: the first project whose files need PostgreSQL
 * (or RabbitMQ) starts it, every project that needs it gets the same one, and the last of them to
 * tear down stops it (also when tests fail). Projects load their global setup files separately, so
 * the shared state lives on `globalThis` of vitest's main process.
 * @module
 */
import type { TestProject } from "vitest/node"
import { startPostgres } from "./embeddedPostgres.ts"
import type { Server } from "./projects.ts"
import { startRabbit } from "./rabbitmq.ts"

declare module "vitest" {
  export interface ProvidedContext {
    pgUrl: string
    amqpUrl: string
  }
}

interface Running {
  readonly url: string
  readonly stop: () => Promise<void>
}

interface Shared {
  readonly started: Promise<Running>
  users: number
}

const registry = (): Map<Server, Shared> => {
  const key = Symbol.for("tidings/test/servers")
  const g = globalThis as { [key]?: Map<Server, Shared> }
  return (g[key] ??= new Map())
}

const start = (server: Server): Promise<Running> =>
  server === "postgres"
    ? startPostgres()
    : startRabbit().then((rabbit) => {
      if (process.env["TIDINGS_TEST_VERBOSE"] !== undefined) {
        console.log(
          `RabbitMQ: ${
            rabbit.external ? "external" : "private node"
          }, install ${rabbit.timings.installMs} ms, start ${rabbit.timings.startMs} ms`
        )
      }
      return rabbit
    })

/**
 * A vitest global setup for `project` that uses `server`: starts it unless another project already
 * did, provides its URL (`inject("pgUrl")` / `inject("amqpUrl")`) and puts it in the environment for
 * child processes (`TIDINGS_TEST_PG_URL` / `TIDINGS_TEST_AMQP_URL`); the returned teardown stops the
 * server when no project uses it any more.
 */
export const useServer = async (server: Server, project: TestProject): Promise<() => Promise<void>> => {
  const servers = registry()
  let shared = servers.get(server)
  if (shared === undefined) {
    shared = { started: start(server), users: 0 }
    servers.set(server, shared)
  }
  shared.users++
  let running: Running
  try {
    running = await shared.started
  } catch (error) {
    // A later run in the same process (watch mode) tries again.
    if (--shared.users === 0) servers.delete(server)
    throw error
  }
  if (server === "postgres") {
    project.provide("pgUrl", running.url)
    process.env["TIDINGS_TEST_PG_URL"] = running.url
  } else {
    project.provide("amqpUrl", running.url)
    process.env["TIDINGS_TEST_AMQP_URL"] = running.url
  }
  const users = shared
  return async () => {
    if (--users.users > 0) return
    servers.delete(server)
    await running.stop()
  }
}
