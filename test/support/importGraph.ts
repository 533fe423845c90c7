/**
 * The import graph of the packages' sources (packages/<name>/src): every static, type-only,
 * re-export and dynamic import (`import("...")` in types too), resolved to files. Imports of another
 * workspace package (`@tidings/core/Errors`) resolve to its source file. Used by the structure test
 * (no import circles, layering) and the architecture test.
 * @module
 */
import * as fs from "node:fs"
import * as path from "node:path"

/** One source file and what it imports. */
export interface SourceFile {
  /** Relative to the repository root: `packages/core/src/Relay.ts`. */
  readonly file: string
  /** The package folder: `core`. */
  readonly pkg: string
  /** Repository files it imports (relative to the root). */
  readonly imports: ReadonlyArray<string>
  /** Other specifiers: `effect`, `effect/sql`, `node:fs`, `amqplib`. */
  readonly external: ReadonlyArray<string>
}

// `from "x"` (imports, `import type`, `export ... from`), `import "x"`, `import("x")`.
const specifierPattern = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)"([^"]+)"/gm

/** The specifiers `text` imports, comments left out. */
export const specifiers = (text: string): ReadonlyArray<string> => {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "")
  return [...code.matchAll(specifierPattern)].map((m) => m[1]!)
}

const walk = (dir: string): ReadonlyArray<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(path.join(dir, e.name)) : e.name.endsWith(".ts") ? [path.join(dir, e.name)] : []
  )

/** Every source file of every package under packages/, with its imports resolved. */
export const sourceGraph = (root: string): ReadonlyArray<SourceFile> => {
  const packages = fs.readdirSync(path.join(root, "packages")).filter((p) =>
    fs.existsSync(path.join(root, "packages", p, "src"))
  )
  const byName = new Map(
    packages.map((
      p
    ) => [JSON.parse(fs.readFileSync(path.join(root, "packages", p, "package.json"), "utf8")).name as string, p])
  )
  const resolveWorkspace = (spec: string): string | undefined => {
    const m = /^(@tidings\/[^/]+)(?:\/(.+))?$/.exec(spec)
    const pkg = m === null ? undefined : byName.get(m[1]!)
    if (pkg === undefined) return undefined
    return `packages/${pkg}/src/${m![2] === undefined ? "index" : m![2]}.ts`
  }
  return packages.flatMap((pkg) =>
    walk(path.join(root, "packages", pkg, "src")).map((abs): SourceFile => {
      const file = path.relative(root, abs)
      const imports: Array<string> = []
      const external: Array<string> = []
      for (const spec of specifiers(fs.readFileSync(abs, "utf8"))) {
        if (spec.startsWith(".")) imports.push(path.relative(root, path.resolve(path.dirname(abs), spec)))
        else {
          const workspace = resolveWorkspace(spec)
          if (workspace !== undefined) imports.push(workspace)
          else external.push(spec)
        }
      }
      return { file, pkg, imports: [...new Set(imports)], external: [...new Set(external)] }
    })
  )
}

/**
 * The import circles of the graph: each strongly connected component of more than one file (or a
 * file importing itself), as one cycle through it (`a.ts → b.ts → a.ts`).
 */
export const circles = (graph: ReadonlyArray<SourceFile>): ReadonlyArray<ReadonlyArray<string>> => {
  const edges = new Map(graph.map((f) => [f.file, f.imports]))
  // Tarjan's strongly connected components.
  let index = 0
  const indices = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const components: Array<Array<string>> = []
  const visit = (v: string) => {
    indices.set(v, index)
    low.set(v, index++)
    stack.push(v)
    onStack.add(v)
    for (const w of edges.get(v) ?? []) {
      if (!edges.has(w)) continue
      if (!indices.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, indices.get(w)!))
    }
    if (low.get(v) === indices.get(v)) {
      const component: Array<string> = []
      let w: string
      do {
        w = stack.pop()!
        onStack.delete(w)
        component.push(w)
      } while (w !== v)
      if (component.length > 1 || (edges.get(v) ?? []).includes(v)) components.push(component)
    }
  }
  for (const v of edges.keys()) if (!indices.has(v)) visit(v)
  // One cycle per component: a shortest way back from its first file to itself.
  return components.map((component) => {
    const members = new Set(component)
    const start = [...members].sort()[0]!
    const previous = new Map<string, string>()
    const queue = [start]
    for (let i = 0; i < queue.length; i++) {
      for (const w of edges.get(queue[i]!) ?? []) {
        if (!members.has(w)) continue
        if (w === start) {
          const cycle: Array<string> = []
          for (let at = queue[i]!; at !== start; at = previous.get(at)!) cycle.unshift(at)
          return [start, ...cycle, start]
        }
        if (!previous.has(w) && w !== start) {
          previous.set(w, queue[i]!)
          queue.push(w)
        }
      }
    }
    return [...component, component[0]!]
  })
}
