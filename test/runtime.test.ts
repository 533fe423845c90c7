import { describe, expect, it } from "@effect/vitest"

// The test command runs the whole suite twice, under Node and under Deno. This file proves which
// runtime a run is on, so a Deno run that silently fell back to Node fails here.
declare const Deno: { readonly version: { readonly deno: string } } | undefined

describe("runtime", () => {
  it("runs on the runtime the test command asked for, at a supported version", () => {
    const actual = typeof Deno !== "undefined" ? "deno" : "node"
    const expected = process.env["TIDINGS_EXPECT_RUNTIME"]
    if (expected !== undefined) expect(actual).toBe(expected)
    if (actual === "deno") {
      expect(Number(Deno!.version.deno.split(".")[0])).toBe(2)
    } else {
      expect(Number(process.versions.node.split(".")[0])).toBeGreaterThanOrEqual(22)
    }
  })
})
