/**
 * Whether a process traces, decided from the standard OpenTelemetry variables alone (pure: no SDK
 * is loaded to decide). Tracing is off unless asked for:
 *
 * - `OTEL_SDK_DISABLED=true` turns it off, whatever else is set.
 * - `OTEL_TRACES_EXPORTER` set to `otlp` and/or `console` turns it on; `none` turns it off (also
 *   when an endpoint is set). Anything else (`zipkin`, `jaeger`, `none` beside another value) is
 *   refused: the process does not start, and the error says which variable to fix.
 * - With `OTEL_TRACES_EXPORTER` unset, an endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
 *   `OTEL_EXPORTER_OTLP_ENDPOINT`) turns it on with the `otlp` exporter.
 * - OTLP goes over HTTP only: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (or `OTEL_EXPORTER_OTLP_PROTOCOL`)
 *   may be `http/protobuf` (the default) or `http/json`; `grpc` is refused at start rather than
 *   sent to a port that would not understand it.
 *
 * What it returns is safe to log: the endpoint without credentials, query or fragment, and the
 * names (never the values) of the export headers, which often carry tokens.
 *
 * @example
 *   tracingSettings({}, 'countersign-proxy'); // { enabled: false, reason: 'no OTEL_TRACES_EXPORTER or OTLP endpoint is set' }
 *   tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, 'countersign-proxy');
 *   // { enabled: true, serviceName: 'countersign-proxy', exporters: ['otlp'], protocol: 'http/protobuf',
 *   //   endpoint: 'http://collector:4318/v1/traces', headerNames: [] }
 */

export type TraceExporterName = 'otlp' | 'console';
export type OtlpHttpProtocol = 'http/protobuf' | 'http/json';

export type TracingSettings =
  | { enabled: false; reason: string }
  | {
      enabled: true;
      /** service.name: OTEL_SERVICE_NAME, else service.name in OTEL_RESOURCE_ATTRIBUTES, else the process's default. */
      serviceName: string;
      exporters: TraceExporterName[];
      /** Only when `otlp` is among the exporters. */
      protocol?: OtlpHttpProtocol;
      /** Where OTLP spans go, without userinfo, query or fragment. Only with `otlp`. */
      endpoint?: string;
      /** Names of the export headers (OTEL_EXPORTER_OTLP_[TRACES_]HEADERS), lower case; never their values. */
      headerNames: string[];
    };

/** A tracing variable with a value Countersign does not accept; the process does not start. */
export class TelemetryConfigError extends Error {
  /** The CLI's "fix your configuration" code (exit code 2, no usage line). */
  readonly code = 'CONFIG_INVALID';
}

const DEFAULT_ENDPOINT = 'http://localhost:4318/v1/traces';
const EXPORTERS: ReadonlySet<string> = new Set(['otlp', 'console']);
const PROTOCOLS: ReadonlySet<string> = new Set(['http/protobuf', 'http/json']);

/** As the SDK reads a variable: unset, empty and blank are the same. */
function valueOf(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const raw = env[name];
  return raw === undefined || raw.trim() === '' ? undefined : raw.trim();
}

function listOf(env: NodeJS.ProcessEnv, name: string): string[] {
  return [...new Set((valueOf(env, name) ?? '').split(',').map((part) => part.trim()).filter((part) => part !== ''))];
}

/** The SDK's boolean rule: `true` in any case, after trimming; anything else is false. */
function isTrue(env: NodeJS.ProcessEnv, name: string): boolean {
  return valueOf(env, name)?.toLowerCase() === 'true';
}

export function tracingSettings(env: NodeJS.ProcessEnv, defaultServiceName: string): TracingSettings {
  if (isTrue(env, 'OTEL_SDK_DISABLED')) return { enabled: false, reason: 'OTEL_SDK_DISABLED=true' };

  const listed = listOf(env, 'OTEL_TRACES_EXPORTER');
  const tracesEndpoint = valueOf(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const baseEndpoint = valueOf(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  if (listed.includes('none')) {
    if (listed.length > 1) {
      throw new TelemetryConfigError(`OTEL_TRACES_EXPORTER="${env.OTEL_TRACES_EXPORTER}" lists none beside other exporters; set either none or the exporters`);
    }
    return { enabled: false, reason: 'OTEL_TRACES_EXPORTER=none' };
  }
  if (listed.length === 0 && tracesEndpoint === undefined && baseEndpoint === undefined) {
    return { enabled: false, reason: 'no OTEL_TRACES_EXPORTER or OTLP endpoint is set' };
  }
  const unknown = listed.filter((name) => !EXPORTERS.has(name));
  if (unknown.length > 0) {
    throw new TelemetryConfigError(`OTEL_TRACES_EXPORTER: ${unknown.map((name) => `"${name}"`).join(', ')} is not supported; use otlp (OTLP over HTTP), console or none`);
  }
  const exporters = (listed.length === 0 ? ['otlp'] : listed) as TraceExporterName[];
  const serviceName = valueOf(env, 'OTEL_SERVICE_NAME') ?? serviceNameAttribute(env) ?? defaultServiceName;
  const headerNames = [...new Set([...headerNamesOf(env, 'OTEL_EXPORTER_OTLP_HEADERS'), ...headerNamesOf(env, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS')])];
  if (!exporters.includes('otlp')) return { enabled: true, serviceName, exporters, headerNames };

  const protocolVariable = valueOf(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') !== undefined ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const protocol = valueOf(env, protocolVariable) ?? 'http/protobuf';
  if (protocol === 'grpc') {
    throw new TelemetryConfigError(
      `${protocolVariable}=grpc: Countersign exports traces over OTLP/HTTP only; set it to http/protobuf (or http/json) and point the endpoint at the collector's OTLP/HTTP port (4318 by default)`,
    );
  }
  if (!PROTOCOLS.has(protocol)) throw new TelemetryConfigError(`${protocolVariable}="${protocol}" is not supported; use http/protobuf (the default) or http/json`);

  const [variable, endpoint] =
    tracesEndpoint !== undefined
      ? ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', tracesEndpoint]
      : baseEndpoint !== undefined
        ? ['OTEL_EXPORTER_OTLP_ENDPOINT', `${baseEndpoint.endsWith('/') ? baseEndpoint : `${baseEndpoint}/`}v1/traces`]
        : ['default', DEFAULT_ENDPOINT];
  return { enabled: true, serviceName, exporters, protocol: protocol as OtlpHttpProtocol, endpoint: loggableUrl(variable, endpoint), headerNames };
}

/** The URL without what may be secret in it (userinfo, query, fragment); refuses what is not an http(s) URL. */
function loggableUrl(variable: string, value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TelemetryConfigError(`${variable} is not a URL; give the collector's OTLP/HTTP address, such as http://collector:4318`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new TelemetryConfigError(`${variable} must be an http or https URL (OTLP/HTTP); got the scheme ${url.protocol}`);
  }
  return `${url.protocol}//${url.host}${url.pathname}`;
}

/** `api-key=…,x-tenant=…` → ['api-key', 'x-tenant']. */
function headerNamesOf(env: NodeJS.ProcessEnv, name: string): string[] {
  const raw = valueOf(env, name);
  if (raw === undefined) return [];
  return raw
    .split(',')
    .map((pair) => pair.split('=', 1)[0]!.trim().toLowerCase())
    .filter((header) => header !== '');
}

/** service.name from OTEL_RESOURCE_ATTRIBUTES (`key=value,…`, percent-encoded), as the SDK's env detector reads it. */
function serviceNameAttribute(env: NodeJS.ProcessEnv): string | undefined {
  const raw = valueOf(env, 'OTEL_RESOURCE_ATTRIBUTES');
  if (raw === undefined) return undefined;
  let found: string | undefined;
  for (const pair of raw.split(',').filter((part) => part.trim() !== '')) {
    const parts = pair.split('=');
    // The SDK discards the whole variable when one entry is malformed.
    if (parts.length !== 2) return undefined;
    try {
      if (decodeURIComponent(parts[0]!.trim()) === 'service.name') found = decodeURIComponent(parts[1]!.trim());
    } catch {
      return undefined;
    }
  }
  return found || undefined;
}
