/** The part of the Deno namespace used here, declared so that the package type-checks without Deno's types. */
export interface DenoHttpServer {
  readonly addr: { readonly hostname: string; readonly port: number }
  readonly finished: Promise<void>
  shutdown(): Promise<void>
}

export interface DenoNamespace {
  serve(
    options: {
      readonly port?: number
      readonly hostname?: string
      readonly signal?: AbortSignal
      readonly onListen?: (addr: { readonly hostname: string; readonly port: number }) => void
    },
    handler: (request: Request, info?: { readonly completed?: Promise<void> }) => Response | Promise<Response>
  ): DenoHttpServer
}

/** The Deno namespace when running on Deno. */
export const deno = (): DenoNamespace | undefined => (globalThis as { readonly Deno?: DenoNamespace }).Deno
