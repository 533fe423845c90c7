/**
 * The recipes (docs/recipes), each a program under examples/ run as a child process on the runtime
 * the suite runs on, against the test PostgreSQL and RabbitMQ: a producer with its relay in process;
 * a relay worker process woken by the producers' NOTIFY, stopped by SIGTERM; a RabbitMQ consumer
 * whose inbox charges each order once although one is delivered twice. (The projection and the
 * saga recipes are examples/orders-view and examples/orders, tested by their own tests.)
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { inject } from "vitest"
import { runExample } from "./support/processes.ts"
import { root } from "./support/runtimes.ts"

const example = (name: string) => path.join(root, "examples", name, "main.ts")
const servers = () => ({ TIDINGS_PG_URL: inject("pgUrl"), TIDINGS_AMQP_URL: inject("amqpUrl") })

describe("recipes", () => {
  it("every recipe page links an example that exists, and the README lists every page", () => {
    const pages = fs.readdirSync(path.join(root, "docs/recipes")).filter((f) => f.endsWith(".md") && f !== "README.md")
    const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
    assert.isAtLeast(pages.length, 5)
    for (const page of pages) {
      assert.include(readme, `docs/recipes/${page}`, page)
      const text = fs.readFileSync(path.join(root, "docs/recipes", page), "utf8")
      const examples = [...text.matchAll(/\(\.\.\/\.\.\/examples\/([\w-]+)\/?/g)].map((m) => m[1]!)
      assert.isNotEmpty(examples, `${page} links no example`)
      for (const name of examples) {
        assert.isTrue(fs.existsSync(path.join(root, "examples", name)), `${page}: examples/${name}`)
      }
    }
  })

  it("producer: orders and their events commit together; the relay in the same process publishes them to RabbitMQ", async () => {
    const { code, output } = await runExample(example("producer"), servers())
    assert.strictEqual(code, 0, output)
    assert.include(output, "broker: RabbitMQ")
    assert.match(output, /published 3 events for 3 orders; outbox: 0 pending, 0 failed/, output)
  })

  it("relay worker: a separate process publishes what a relay-less producer commits, and stops cleanly on SIGTERM", async () => {
    const { code, output } = await runExample(example("relay-worker"), servers())
    assert.strictEqual(code, 0, output)
    assert.include(output, "[worker] relay running; Ctrl-C stops")
    assert.match(output, /the worker published all 3 within \d+ ms/, output)
    assert.include(output, "worker stopped on SIGTERM (exit 0)")
  })

  it("RabbitMQ consumer with the inbox: every order charged once, the duplicate delivery acked without effect", async () => {
    const { code, output } = await runExample(example("rabbitmq-consumer"), servers())
    assert.strictEqual(code, 0, output)
    assert.strictEqual(output.match(/-o-\d charged 1 time$/gm)?.length, 3, output)
    assert.match(output, /1 duplicate delivery acked without charging again/, output)
  })

  it("RabbitMQ consumer without a broker says what it needs and exits non-zero", async () => {
    const { code, output } = await runExample(example("rabbitmq-consumer"), {
      TIDINGS_PG_URL: inject("pgUrl"),
      TIDINGS_AMQP_URL: ""
    })
    assert.notStrictEqual(code, 0)
    assert.include(output, "this recipe needs RabbitMQ")
  })
})
