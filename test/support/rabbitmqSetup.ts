/**
 * Vitest global setup of the projects whose files need RabbitMQ: one broker (a private node, or
 * `TIDINGS_AMQP_URL`) for the whole run, shared by those projects (see servers.ts). Test files
 * isolate themselves with unique queue and exchange names.
 */
import type { TestProject } from "vitest/node"
import { useServer } from "./servers.ts"

export default (project: TestProject): Promise<() => Promise<void>> => useServer("rabbitmq", project)
