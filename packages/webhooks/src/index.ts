/**
 * Tidings webhooks: a relay `Publisher` that delivers outbox events as signed HTTP requests
 * (Standard Webhooks), and a receiver that verifies them and handles each once through the inbox.
 * `fetch` and WebCrypto only: it runs on Node, Deno, Bun and Cloudflare Workers.
 * @module
 */
export * as WebhookPublisher from "./WebhookPublisher.ts"
export * as WebhookReceiver from "./WebhookReceiver.ts"
export * as WebhookSignature from "./WebhookSignature.ts"
