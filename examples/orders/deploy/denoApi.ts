/** The part of Deno's API these entries use, so that the repository type-checks without Deno's types. */
export interface DenoApi {
  serve(
    options: {
      readonly port?: number
      readonly hostname?: string
      readonly onListen?: (addr: { readonly hostname: string; readonly port: number }) => void
    },
    handler: (request: Request, info?: { readonly completed?: Promise<void> }) => Response | Promise<Response>
  ): { shutdown(): Promise<void> }
  addSignalListener(signal: "SIGINT" | "SIGTERM", handler: () => void): void
  exit(code?: number): never
  readonly env: { get(name: string): string | undefined; toObject(): Record<string, string> }
}
