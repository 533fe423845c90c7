/**
 * Keeps stdout for the one `--json` object. Imported first by `main.ts`, so it runs before any
 * library can print: postgres.js prints server notices with `console.log` by default, and Effect's
 * console loggers write to stdout unless told otherwise.
 * @module
 */
console.log = console.error
console.info = console.error
console.debug = console.error

/** Writes text to stdout: the only place in the benchmarks that may. */
export const writeStdout = (text: string): Promise<void> =>
  new Promise((resolve, reject) => process.stdout.write(text, (error) => (error ? reject(error) : resolve())))
