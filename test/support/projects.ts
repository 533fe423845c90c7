/**
 * The vitest projects of the workspace: one per package (and one for the repository-wide tests in
 * `test/`), split by the servers their files need. A file needs PostgreSQL or RabbitMQ when it, or a
 * module it imports from the repository (transitively), asks for the test server's URL
 * (`inject("pgUrl")`, `TIDINGS_TEST_PG_URL`, and the same for `amqpUrl`); the project of such files
 * has the global setup that starts that server, the others start nothing.
 * @module
 */
import * as fs from "node:fs"
import * as path from "node:path"

/** A server a test file needs. */
export type Server = "postgres" | "rabbitmq"

const markers: ReadonlyArray<readonly [Server, RegExp]> = [
  ["postgres", /inject\(\s*"pgUrl"\s*\)|TIDINGS_TEST_PG_URL/],
  ["rabbitmq", /inject\(\s*"amqpUrl"\s*\)|TIDINGS_TEST_AMQP_URL/]
]

// Relative static and dynamic imports, and `export ... from`.
const importPattern = /(?:from\s+|import\s*\(\s*|import\s+)"(\.{1,2}\/[^"]+)"/g

/** The repository files `file` imports (relative specifiers only), resolved to absolute paths. */
const localImports = (file: string, text: string): ReadonlyArray<string> =>
  [...text.matchAll(importPattern)]
    .map((m) => path.resolve(path.dirname(file), m[1]!))
    .filter((f) => f.endsWith(".ts") && fs.existsSync(f))

/** The servers `file` needs, through the modules it imports. */
export const serversOf = (file: string, cache: Map<string, ReadonlySet<Server>> = new Map()): ReadonlySet<Server> => {
  const known = cache.get(file)
  if (known !== undefined) return known
  const found = new Set<Server>()
  cache.set(file, found) // import cycles end here
  const text = fs.readFileSync(file, "utf8")
  for (const [server, pattern] of markers) if (pattern.test(text)) found.add(server)
  for (const imported of localImports(file, text)) for (const server of serversOf(imported, cache)) found.add(server)
  return found
}

/** A group of test files that need the same servers. */
export interface ProjectFiles {
  /** `core`, `postgres+pg`, `tidings+pg+amqp`, ... */
  readonly name: string
  readonly servers: ReadonlyArray<Server>
  /** Paths relative to the repository root. */
  readonly files: ReadonlyArray<string>
}

const walk = (dir: string): ReadonlyArray<string> =>
  fs.existsSync(dir)
    ? fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.name === "node_modules" ? [] : e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]
    )
    : []

/** Every `*.test.ts` of `packages/<name>/test` and `test/`, grouped by package and by the servers they need. */
export const projectFiles = (root: string): ReadonlyArray<ProjectFiles> => {
  const groups = new Map<string, { servers: ReadonlyArray<Server>; files: Array<string> }>()
  const cache = new Map<string, ReadonlySet<Server>>()
  const owners = [
    ...fs.readdirSync(path.join(root, "packages")).sort().map((name) =>
      [name, path.join(root, "packages", name, "test")] as const
    ),
    ["tidings", path.join(root, "test")] as const
  ]
  for (const [owner, dir] of owners) {
    for (const file of walk(dir).filter((f) => f.endsWith(".test.ts")).sort()) {
      const servers = (["postgres", "rabbitmq"] as const).filter((s) => serversOf(file, cache).has(s))
      const name = [owner, ...servers.map((s) => s === "postgres" ? "pg" : "amqp")].join("+")
      const group = groups.get(name) ?? { servers, files: [] }
      group.files.push(path.relative(root, file))
      groups.set(name, group)
    }
  }
  return [...groups].map(([name, { servers, files }]) => ({ name, servers, files }))
}
