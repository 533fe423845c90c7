/**
 * A real headless browser for tests: Debian's `chromium` (installed with apt when missing and the
 * tests run as root, as test/support/rabbitmq.ts does for the broker), driven by `playwright-core`
 * with its executable path (playwright's own browser downloads are not used), on a fresh profile
 * removed at the end.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { type BrowserContext, chromium } from "playwright-core"

/** Where Debian puts the browser. */
export const executablePath = "/usr/bin/chromium"

const isRoot = () => typeof process.getuid === "function" && process.getuid() === 0

/** Installs Debian's chromium when missing (root only); throws with the reason otherwise. */
export const ensureChromium = (): void => {
  if (fs.existsSync(executablePath)) return
  if (!isRoot()) {
    throw new Error(
      `${executablePath} is missing and the tests do not run as root, so it cannot be installed: apt-get install chromium`
    )
  }
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" }
  for (const args of [["update"], ["install", "-y", "chromium"]]) {
    const res = spawnSync("apt-get", args, { env, encoding: "utf8", timeout: 900_000 })
    if (res.status !== 0 && args[0] === "install") {
      throw new Error(
        `apt-get ${args.join(" ")} failed (${res.status ?? res.signal}): ${(res.stderr ?? "").slice(-2000)}`
      )
    }
  }
  if (!fs.existsSync(executablePath)) throw new Error(`apt-get install chromium did not provide ${executablePath}`)
}

/** A browser context on a fresh profile; `close()` ends the browser and removes the profile. */
export const launch = async (): Promise<{ readonly context: BrowserContext; readonly close: () => Promise<void> }> => {
  ensureChromium()
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "tidings-chromium-"))
  try {
    // launchPersistentContext takes the profile folder itself (playwright refuses --user-data-dir in args).
    const context = await chromium.launchPersistentContext(profile, {
      executablePath,
      headless: true,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync"
      ],
      viewport: { width: 1360, height: 900 },
      deviceScaleFactor: 1,
      timezoneId: "UTC",
      locale: "en-US"
    })
    return {
      context,
      close: async () => {
        await context.close().catch(() => undefined)
        fs.rmSync(profile, { recursive: true, force: true })
      }
    }
  } catch (error) {
    fs.rmSync(profile, { recursive: true, force: true })
    throw error
  }
}
