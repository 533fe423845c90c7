/**
 * Writes `deno.json` beside this file: the import map that lets Deno run the orders service from npm
 * specifiers only, with no `node_modules` (as Deno Deploy does). Third-party packages are `npm:`
 * specifiers at the workspace's versions; the `@tidings/*` packages, not published yet, point at
 * their sources (published, they would be `npm:@tidings/core@…` too). Every module of every package
 * gets its own entry, because an import map cannot add the `.ts` the packages' `exports` add.
 *
 * `node examples/orders/deploy/importMap.ts` after adding a module; a test checks the file is current.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const here = path.dirname(fileURLToPath(import.meta.url))
const root = path.resolve(here, "../../..")
const packages = ["core", "postgres", "rabbitmq", "hono", "webhooks"]

/** Versions pinned where the workspace pins them. */
const versionOf = (name: string, manifest: string): string => {
  const json = JSON.parse(fs.readFileSync(path.join(root, manifest), "utf8")) as Record<
    string,
    Record<string, string> | undefined
  >
  const spec = json["devDependencies"]?.[name] ?? json["dependencies"]?.[name]
  if (spec === undefined) throw new Error(`${name} is not in ${manifest}`)
  return spec.replace(/^[\^~]/, "")
}

/** The config's content. */
export const render = (): string => {
  const imports: Record<string, string> = {}
  for (const pkg of packages) {
    const src = path.join(root, "packages", pkg, "src")
    imports[`@tidings/${pkg}`] = `../../../packages/${pkg}/src/index.ts`
    for (const file of fs.readdirSync(src).filter((f) => f.endsWith(".ts") && f !== "index.ts").sort()) {
      imports[`@tidings/${pkg}/${file.slice(0, -3)}`] = `../../../packages/${pkg}/src/${file}`
    }
  }
  const effect = versionOf("effect", "package.json")
  const hono = versionOf("hono", "package.json")
  Object.assign(imports, {
    effect: `npm:effect@${effect}`,
    "effect/": `npm:/effect@${effect}/`,
    hono: `npm:hono@${hono}`,
    "hono/": `npm:/hono@${hono}/`,
    postgres: `npm:postgres@${versionOf("postgres", "packages/postgres/package.json")}`,
    amqplib: `npm:amqplib@${versionOf("amqplib", "packages/rabbitmq/package.json")}`
  })
  return JSON.stringify({ nodeModulesDir: "none", imports }, null, 2) + "\n"
}

/** Where the config lives. */
export const file = path.join(here, "deno.json")

if (import.meta.url === `file://${process.argv[1]}`) {
  fs.writeFileSync(file, render())
  console.log(`wrote ${path.relative(process.cwd(), file)}`)
}
