/**
 * Builds the console page into the package: packages/hono/console/{index.html,style.css,app.js}
 * become string exports of src/internal/consoleAssets.ts, compiled with the rest of the package, so
 * that users need no build step and every runtime (Node, Deno, Bun, Workers) serves the same bytes.
 *
 *   node packages/hono/scripts/build-console.ts           writes the file
 *   node packages/hono/scripts/build-console.ts --check   exits 1 when it is out of date
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** The readable sources. */
export const sourceDir = path.join(import.meta.dirname, "../console")
/** The generated module. */
export const target = path.join(import.meta.dirname, "../src/internal/consoleAssets.ts")

const read = (file: string) => fs.readFileSync(path.join(sourceDir, file), "utf8")

/** The generated module's text, from the current sources. */
export const render = (): string => {
  const html = read("index.html")
  const css = read("style.css")
  const js = read("app.js")
  return [
    "// Generated from packages/hono/console/ by packages/hono/scripts/build-console.ts. Do not edit.",
    "",
    "/** The console page (its script and style URLs get the mount point when served). */",
    `export const html = ${JSON.stringify(html)}`,
    "",
    "/** The console's stylesheet. */",
    `export const css = ${JSON.stringify(css)}`,
    "",
    "/** The console's script (an ES module, no dependencies). */",
    `export const js = ${JSON.stringify(js)}`,
    ""
  ].join("\n")
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const text = render()
  const current = fs.existsSync(target) ? fs.readFileSync(target, "utf8") : ""
  if (process.argv.includes("--check")) {
    if (current !== text) {
      console.error(
        `${path.relative(process.cwd(), target)} is out of date: run node packages/hono/scripts/build-console.ts`
      )
      process.exit(1)
    }
    console.log("console assets are up to date")
  } else if (current !== text) {
    fs.writeFileSync(target, text)
    console.log(`wrote ${path.relative(process.cwd(), target)} (${text.length} bytes)`)
  } else {
    console.log("console assets are up to date")
  }
}
