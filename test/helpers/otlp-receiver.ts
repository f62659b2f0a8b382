/**
 * A real OTLP/HTTP trace receiver on loopback for tests, as a collector's would be: `POST
 * /v1/traces` with an `ExportTraceServiceRequest` in the OTLP JSON encoding
 * (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`; gzip accepted), answered 200 `{}`. Every span is
 * flattened with its service name, and ids as the hex strings the JSON encoding uses. A request in
 * another encoding (protobuf) is counted in `undecoded` and answered 415, so a test configured
 * wrongly fails on a missing span rather than passing on a silent one. Any request at all counts
 * in `requests`, which is how a test shows that nothing was sent.
 *
 * @example
 *   const receiver = await startOtlpReceiver();
 *   t.teardown(() => receiver.close());
 *   // child env: OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json'
 *   const evaluate = await receiver.waitFor((span) => span.name === 'countersign.evaluate');
 *   evaluate.attributes['countersign.decision']; // 'allow'
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { closeServer, listen } from './loopback.js';

export type OtlpValue = string | number | boolean | null | OtlpValue[];

export interface ReceivedSpan {
  service: string;
  scope: string;
  traceId: string;
  spanId: string;
  /** Empty for a root span. */
  parentSpanId: string;
  name: string;
  /** 'internal' | 'server' | 'client' | 'producer' | 'consumer' | 'unspecified' */
  kind: string;
  attributes: Record<string, OtlpValue>;
  links: Array<{ traceId: string; spanId: string }>;
  /** 0 unset, 1 ok, 2 error. */
  statusCode: number;
}

export interface OtlpReceiver {
  url: string;
  spans: ReceivedSpan[];
  /** Every request that arrived, whatever its path or encoding. */
  requests: number;
  /** The headers of each request, in order of arrival. */
  headers: IncomingHttpHeaders[];
  /** Requests that were not OTLP JSON (answered 415). */
  undecoded: number;
  /** Polls `spans` until one matches; rejects after `timeoutMs` (default 30 s) naming what it saw. */
  waitFor(match: (span: ReceivedSpan) => boolean, what?: string, timeoutMs?: number): Promise<ReceivedSpan>;
  close(): Promise<void>;
}

const KINDS = ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'];

interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
}

function valueOf(value: AnyValue | undefined): OtlpValue {
  if (value === undefined) return null;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(valueOf);
  return null;
}

function attributesOf(list: Array<{ key: string; value?: AnyValue }> | undefined): Record<string, OtlpValue> {
  return Object.fromEntries((list ?? []).map(({ key, value }) => [key, valueOf(value)]));
}

interface ExportRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: Array<{ key: string; value?: AnyValue }> };
    scopeSpans?: Array<{
      scope?: { name?: string };
      spans?: Array<{
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind?: number;
        attributes?: Array<{ key: string; value?: AnyValue }>;
        links?: Array<{ traceId: string; spanId: string }>;
        status?: { code?: number };
      }>;
    }>;
  }>;
}

function flatten(request: ExportRequest): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const resourceSpans of request.resourceSpans ?? []) {
    const service = String(attributesOf(resourceSpans.resource?.attributes)['service.name'] ?? '');
    for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
      for (const span of scopeSpans.spans ?? []) {
        out.push({
          service,
          scope: scopeSpans.scope?.name ?? '',
          traceId: span.traceId,
          spanId: span.spanId,
          parentSpanId: span.parentSpanId ?? '',
          name: span.name,
          kind: KINDS[span.kind ?? 0] ?? 'unspecified',
          attributes: attributesOf(span.attributes),
          links: (span.links ?? []).map(({ traceId, spanId }) => ({ traceId, spanId })),
          statusCode: span.status?.code ?? 0,
        });
      }
    }
  }
  return out;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      receiver.requests += 1;
      receiver.headers.push(request.headers);
      let raw = Buffer.concat(chunks);
      try {
        if (request.headers['content-encoding'] === 'gzip') raw = gunzipSync(raw);
        const json = request.method === 'POST' && request.url === '/v1/traces' && String(request.headers['content-type']).startsWith('application/json');
        if (!json) throw new Error('not OTLP JSON');
        receiver.spans.push(...flatten(JSON.parse(raw.toString('utf8')) as ExportRequest));
      } catch {
        receiver.undecoded += 1;
        response.writeHead(415, { 'content-type': 'application/json' }).end('{}');
        return;
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  const receiver: OtlpReceiver = {
    url: '',
    spans: [],
    requests: 0,
    headers: [],
    undecoded: 0,
    async waitFor(match, what = 'a matching span', timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = receiver.spans.find(match);
        if (found !== undefined) return found;
        if (Date.now() > deadline) {
          throw new Error(`no span like ${what} arrived within ${timeoutMs / 1000} s; received: ${receiver.spans.map((span) => `${span.service}:${span.name}`).join(', ') || 'none'}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    close: () => closeServer(server),
  };
  receiver.url = await listen(server);
  return receiver;
}
