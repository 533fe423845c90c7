/**
 * Tidings for Hono: run handlers with an app's Effect layers (one runtime per process), decode input
 * with Schema, run commands in one outbox transaction, serve on Node and Deno with safe defaults, and
 * mount the operator console, the saga, outbox, inbox and dead-letter admin views, health and
 * readiness probes and Prometheus metrics.
 * @module
 */
export * as Auth from "./Auth.ts"
export * as Command from "./Command.ts"
export * as Console from "./Console.ts"
export * as HttpErrors from "./HttpErrors.ts"
export * as Input from "./Input.ts"
export * as Prometheus from "./Prometheus.ts"
export * as Routes from "./Routes.ts"
export * as Runtime from "./Runtime.ts"
export * as Safety from "./Safety.ts"
export * as Serve from "./Serve.ts"
