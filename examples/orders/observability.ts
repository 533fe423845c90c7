/**
 * Traces, metrics and logs exported with Effect's own OTLP exporter (effect/observability), over
 * OTLP/HTTP JSON to any OpenTelemetry collector (Grafana Alloy, the OpenTelemetry Collector, Jaeger,
 * Tempo, Honeycomb, ...), configured by the standard OpenTelemetry variables:
 *
 * - `OTEL_EXPORTER_OTLP_ENDPOINT` (e.g. `http://127.0.0.1:4318`): turns it on; unset, nothing is
 *   exported. `OTEL_EXPORTER_OTLP_HEADERS` for an API key (`x-api-key=...`).
 * - `OTEL_SERVICE_NAME` (default `orders` here), `OTEL_RESOURCE_ATTRIBUTES`.
 * - `OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER`, `OTEL_LOGS_EXPORTER`: `otlp` by default here, as
 *   in OpenTelemetry's SDKs (Effect exports a signal only when its variable says `otlp`); `none`
 *   turns one off.
 * - `OTEL_BSP_SCHEDULE_DELAY` (ms between span exports), `OTEL_METRIC_EXPORT_INTERVAL` (ms).
 *
 * The tracer must reach every fiber the app's layers fork (the relay's pollers, the consumers), so
 * it is provided to the app's layers (main.ts).
 */
import { ConfigProvider, Layer } from "effect"
import { FetchHttpClient } from "effect/http"
import { Otlp, OtlpSerialization } from "effect/observability"

/** What the variables default to when they are not set. */
const defaults = ConfigProvider.fromEnv({
  env: {
    OTEL_SERVICE_NAME: "orders",
    OTEL_TRACES_EXPORTER: "otlp",
    OTEL_METRICS_EXPORTER: "otlp",
    OTEL_LOGS_EXPORTER: "otlp"
  }
})

/** OTLP export of the app's traces, metrics and logs, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set. */
export const layer = Otlp.layerFromConfig().pipe(
  Layer.provide(OtlpSerialization.layerJson),
  Layer.provide(FetchHttpClient.layer),
  Layer.provide(ConfigProvider.layerAdd(defaults))
)
