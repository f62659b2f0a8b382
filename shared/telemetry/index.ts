/**
 * OpenTelemetry traces for both processes, off by default. `startTelemetry` decides from the
 * standard `OTEL_*` variables (settings.ts) and, only when tracing is on, loads the official SDK
 * (`@opentelemetry/sdk-node`, with its OTLP/HTTP exporter) by dynamic import; when it is off, the
 * SDK is never loaded and no OpenTelemetry call is made. The SDK reads `process.env` itself, so the
 * decision does too.
 *
 * Hot paths read the `tracing` binding once per request and do nothing else when it is null:
 *
 *   const t = tracing;
 *   return t === null ? check(input) : t.inSpan(SPAN.gateCheck, () => check(input), { after: attributesOf });
 *
 * One SDK per process: the all-in-one `countersign start` runs the authority and the proxy in one
 * process, and each of them takes a share of the same SDK; the first caller's service name wins.
 * The SDK flushes its spans and stops when the last share is released (graceful shutdown), within
 * a bounded time.
 *
 * @example
 *   const telemetry = await startTelemetry({ serviceName: 'countersign-proxy', logger });
 *   resources.add(() => telemetry.shutdown()); // first added, so released last: after the drain
 */
import type { Logger } from 'pino';
import { tracingSettings, type TracingSettings } from './settings.js';
import type { Tracing } from './tracing.js';

export { TelemetryConfigError, tracingSettings, type TracingSettings } from './settings.js';
export type { RequestSpan, SpanOptions, SpanRef, Tracing } from './tracing.js';

/**
 * The process's tracing; null while tracing is off (the default). An ES module live binding:
 * `startTelemetry` sets it before the servers are built.
 */
export let tracing: Tracing | null = null;

export interface Telemetry {
  readonly settings: TracingSettings;
  /** Releases this share; the last one flushes the spans and stops the SDK. Never rejects. */
  shutdown(): Promise<void>;
}

export interface StartTelemetryOptions {
  /** service.name unless OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise. */
  serviceName: string;
  logger: Logger;
  /** How long the last shutdown waits for the final export; default 5 s. */
  shutdownTimeoutMs?: number;
}

interface Running {
  settings: TracingSettings;
  shares: number;
  stop: () => Promise<void>;
}

let running: Promise<Running> | null = null;

/**
 * Starts tracing when the OTEL_* variables ask for it (or takes a share of the SDK already
 * running in this process). Throws `TelemetryConfigError` for a value it refuses.
 */
export async function startTelemetry(options: StartTelemetryOptions): Promise<Telemetry> {
  running ??= open(options).catch((error: unknown) => {
    running = null;
    throw error;
  });
  const current = await running;
  current.shares += 1;
  let released = false;
  return {
    settings: current.settings,
    async shutdown() {
      if (released) return;
      released = true;
      current.shares -= 1;
      if (current.shares > 0) return;
      running = null;
      await current.stop();
    },
  };
}

async function open(options: StartTelemetryOptions): Promise<Running> {
  const settings = tracingSettings(process.env, options.serviceName);
  if (!settings.enabled) return { settings, shares: 0, stop: async () => undefined };
  const { startSdk } = await import('./sdk.js');
  const sdk = startSdk(settings, options.logger);
  tracing = sdk.tracing;
  options.logger.info(
    {
      service_name: settings.serviceName,
      exporters: settings.exporters,
      ...(settings.protocol !== undefined ? { protocol: settings.protocol, endpoint: settings.endpoint } : {}),
      ...(settings.headerNames.length > 0 ? { export_headers: settings.headerNames } : {}),
    },
    settings.exporters.includes('otlp') ? `tracing on: spans go over OTLP/HTTP to ${settings.endpoint}` : 'tracing on',
  );
  const timeoutMs = options.shutdownTimeoutMs ?? 5_000;
  return {
    settings,
    shares: 0,
    stop: async () => {
      tracing = null;
      await sdk.shutdown(timeoutMs).catch((error: unknown) => options.logger.warn({ err: error }, 'tracing: the last spans could not be exported at shutdown'));
    },
  };
}

/** For the ready lines: `off`, or where spans go. */
export function tracingSummary(settings: TracingSettings): string {
  if (!settings.enabled) return 'off';
  return settings.exporters.map((name) => (name === 'otlp' ? `otlp ${settings.protocol} ${settings.endpoint}` : name)).join(', ');
}
