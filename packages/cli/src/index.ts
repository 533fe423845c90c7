/**
 * The `tidings` CLI as a library: run it in-process with `Cli.run(args)`.
 * @module
 */
export * as Cli from "./Cli.ts"
