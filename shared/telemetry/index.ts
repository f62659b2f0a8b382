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
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { SpanAttributes } from './attributes.js';
import { tracingSettings, type TracingSettings } from './settings.js';

export { TelemetryConfigError, tracingSettings, type TracingSettings } from './settings.js';

/** A span held on to for linking (the group commit); opaque outside the tracing module. */
export interface SpanRef {
  readonly __brand: 'SpanRef';
}

export interface SpanOptions<T> {
  /** Default 'internal'. */
  kind?: 'internal' | 'client';
  attributes?: SpanAttributes;
  /** The parent: the authority request's server span (from `startRequest`); default the active span. */
  request?: IncomingMessage;
  /** Start a trace of its own (the group commit, webhook deliveries). */
  root?: boolean;
  /** Spans this one serves (linked both ways). */
  links?: ReadonlyArray<SpanRef | undefined>;
  /** Attributes known once `fn` resolved. */
  after?: (result: T) => SpanAttributes | undefined;
  /** A resolved result that is still a failure: its `error.type` (the span's status becomes ERROR). */
  failure?: (result: T) => string | undefined;
}

/** An authority request's SERVER span, ended when its response closes. */
export interface RequestSpan {
  end(statusCode: number | undefined): void;
}

export interface Tracing {
  /**
   * Runs `fn` (the proxy's handling of one request) in a SERVER span that joins the caller's trace
   * (`traceparent`/`tracestate` of `req`); ends it when `fn` settles, with the response's status.
   */
  serve<T>(req: IncomingMessage, res: ServerResponse, fn: () => Promise<T>): Promise<T>;
  /**
   * Runs `fn` (the gate's answer to one Envoy ext_authz check) in a SERVER span that joins the
   * trace of the request the check describes (the `traceparent`/`tracestate` among `headers`);
   * ends it with the HTTP status `statusOf` reads from the result.
   */
  serveCheck<T>(method: string, headers: IncomingHttpHeaders, attributes: SpanAttributes, fn: () => Promise<T>, statusOf: (result: T) => number | undefined): Promise<T>;
  /** Names the request's server span after its route and adds attributes (no-op outside `serve` and `serveCheck`). */
  annotateRequest(route: string, attributes: SpanAttributes): void;
  /** An authority request's SERVER span, joining the caller's trace; `inSpan({request})` nests under it. */
  startRequest(req: IncomingMessage, route: string | undefined, attributes: SpanAttributes): RequestSpan;
  /** Runs `fn` in a child span (of the active span, the request's, or none) and ends it when `fn` settles. */
  inSpan<T>(name: string, fn: () => Promise<T>, options?: SpanOptions<T>): Promise<T>;
  /** The active span, to link to later; undefined when none records. */
  activeSpan(): SpanRef | undefined;
  /** Writes the active context's propagation headers (`traceparent`, `tracestate`, …) into `carrier`. */
  inject(carrier: Record<string, string>): void;
  /**
   * A flat [name, value, …] header list with the caller's propagation headers replaced by the
   * active context's: the next hop's parent is the active span, not the caller's.
   */
  withPropagation(headers: string[]): string[];
}

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
