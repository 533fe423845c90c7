/**
 * Bundles the Worker (`worker.ts` and everything it imports) into one ES module for workerd or
 * `wrangler deploy --no-bundle`: `node examples/edge/build.ts [outfile]` (default
 * `examples/edge/dist/worker.js`). The `workerd` export condition picks postgres.js' Workers build,
 * which connects over `cloudflare:sockets`; `node:*` modules come from Workers' `nodejs_compat`.
 */
import * as esbuild from "esbuild"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const here = path.dirname(fileURLToPath(import.meta.url))

/** Builds the bundle; resolves with its path. */
export const build = async (outfile = path.join(here, "dist/worker.js")): Promise<string> => {
  await esbuild.build({
    entryPoints: [path.join(here, "worker.ts")],
    outfile,
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    conditions: ["workerd", "worker", "browser"],
    mainFields: ["module", "main"],
    external: ["cloudflare:*", "node:*"],
    // @tidings/hono's Serve imports @hono/node-server only on Node, by a computed specifier.
    logLevel: "warning",
    legalComments: "none"
  }).finally(() => esbuild.stop()) // its service process would outlive the build (and keep pipes open)
  return outfile
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const out = await build(process.argv[2])
  console.log(`built ${path.relative(process.cwd(), out)}`)
}
