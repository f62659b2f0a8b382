/**
 * The SDK side of tracing, loaded by index.ts only when tracing is on. NodeSDK is configured by
 * the standard variables (exporter, endpoint, headers, timeout, sampler, batch sizes, propagators,
 * resource), with three choices of ours: traces only (no metric readers or log processors: the
 * metrics are Prometheus, the logs pino), service.name defaulting to the process's, and the SDK's
 * own diagnostics written through the process's logger (level from OTEL_LOG_LEVEL, default warn).
 *
 * Context travels with AsyncLocalStorage (NodeSDK's default context manager). Spans never record
 * exception messages or stacks: an error is recorded by its type (`error.type`: the Countersign
 * error code, or the error's class name).
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import {
  context,
  createContextKey,
  diag,
  DiagLogLevel,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type DiagLogger,
  type Link,
  type Span,
} from '@opentelemetry/api';
// core and resources as sdk-node re-exports them: the packages this project depends on are the
// API, the SDK and the semantic conventions.
import { core, NodeSDK, resources } from '@opentelemetry/sdk-node';
import type { Logger } from 'pino';
import { ATTR, type SpanAttributes } from './attributes.js';
import type { RequestSpan, SpanOptions, SpanRef, Tracing } from './tracing.js';
import type { TracingSettings } from './settings.js';

/** The proxy's server span in its context, for `annotateRequest`. */
const SERVER_SPAN = createContextKey('countersign server span');
interface ServerEntry {
  span: Span;
  method: string;
}

export interface RunningSdk {
  tracing: Tracing;
  /** Flushes what is buffered and stops; gives up after `timeoutMs`. */
  shutdown(timeoutMs: number): Promise<void>;
}

export function startSdk(settings: TracingSettings & { enabled: true }, logger: Logger): RunningSdk {
  const sdk = new NodeSDK({
    resource: resources.defaultResource().merge(resources.resourceFromAttributes({ 'service.name': settings.serviceName })),
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [],
  });
  sdk.start();
  // After the SDK's constructor, which installs a console logger when OTEL_LOG_LEVEL is set.
  diag.setLogger(diagLogger(logger.child({ component: 'opentelemetry' })), {
    logLevel: core.diagLogLevelFromString(process.env.OTEL_LOG_LEVEL) ?? DiagLogLevel.WARN,
    suppressOverrideMessage: true,
  });
  const tracing = createTracing();
  return {
    tracing,
    async shutdown(timeoutMs: number) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the SDK did not finish exporting within ${timeoutMs} ms`)), timeoutMs);
        timer.unref();
      });
      try {
        await Promise.race([sdk.shutdown(), deadline]);
      } finally {
        clearTimeout(timer);
        // A later start in this process (tests) registers afresh.
        trace.disable();
        context.disable();
        propagation.disable();
        diag.disable();
      }
    },
  };
}

function diagLogger(logger: Logger): DiagLogger {
  const write = (level: 'error' | 'warn' | 'info' | 'debug' | 'trace') => (message: string, ...args: unknown[]) => {
    const error = args.find((arg) => arg instanceof Error);
    logger[level](error !== undefined ? { err: error } : {}, message);
  };
  return { error: write('error'), warn: write('warn'), info: write('info'), debug: write('debug'), verbose: write('trace') };
}

/** Attributes without the undefined ones (the SDK would warn about each). */
function clean(attributes: SpanAttributes | undefined): Attributes {
  const out: Attributes = {};
  if (attributes === undefined) return out;
  for (const [name, value] of Object.entries(attributes)) if (value !== undefined) out[name] = value;
  return out;
}

/** error.type for a thrown error: its stable code when it has one, else its class. Never its message. */
function errorType(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code !== '') return code;
  return error instanceof Error ? error.constructor.name : '_OTHER';
}

function fail(span: Span, type: string): void {
  span.setStatus({ code: SpanStatusCode.ERROR });
  span.setAttribute(ATTR.errorType, type);
}

/** Ends a server span with its answer: 5xx is an error of the server (semantic conventions); 4xx is not. */
function endServer(span: Span, statusCode: number | undefined, error?: unknown): void {
  if (statusCode !== undefined) span.setAttribute(ATTR.httpStatus, statusCode);
  if (error !== undefined) fail(span, errorType(error));
  else if (statusCode !== undefined && statusCode >= 500) fail(span, String(statusCode));
  span.end();
}

function createTracing(): Tracing {
  const tracer = trace.getTracer('countersign');
  /** Authority requests' server span contexts, for their child spans. */
  const requests = new WeakMap<IncomingMessage, Context>();
  /** The header names the propagators write (traceparent, tracestate, baggage by default); read once. */
  let propagationFields: Set<string> | undefined;

  const startServer = (method: string, headers: IncomingHttpHeaders, name: string, attributes: Attributes): { span: Span; ctx: Context } => {
    const parent = propagation.extract(ROOT_CONTEXT, headers);
    const span = tracer.startSpan(name, { kind: SpanKind.SERVER, attributes: { [ATTR.httpMethod]: method, ...attributes } }, parent);
    return { span, ctx: trace.setSpan(parent, span) };
  };

  /** Runs `fn` in a server span that `annotateRequest` can name; ends it with the status `statusOf` reads once `fn` settled. */
  function runServer<T>(method: string, headers: IncomingHttpHeaders, attributes: Attributes, fn: () => Promise<T>, statusOf: (result?: T) => number | undefined): Promise<T> {
    const { span, ctx } = startServer(method, headers, method, attributes);
    let running: Promise<T>;
    try {
      running = context.with(ctx.setValue(SERVER_SPAN, { span, method } satisfies ServerEntry), fn);
    } catch (error) {
      endServer(span, statusOf(), error);
      throw error;
    }
    return running.then(
      (result) => {
        endServer(span, statusOf(result));
        return result;
      },
      (error: unknown) => {
        endServer(span, statusOf(), error);
        throw error;
      },
    );
  }

  function inSpan<T>(name: string, fn: () => Promise<T>, options: SpanOptions<T> = {}): Promise<T> {
    const parent = options.root === true ? ROOT_CONTEXT : (options.request !== undefined ? requests.get(options.request) : undefined) ?? context.active();
    const origins = (options.links ?? []).filter((origin): origin is SpanRef => origin !== undefined) as unknown as Span[];
    const links: Link[] = origins.map((origin) => ({ context: origin.spanContext() }));
    const span = tracer.startSpan(
      name,
      { kind: options.kind === 'client' ? SpanKind.CLIENT : SpanKind.INTERNAL, attributes: clean(options.attributes), links, root: options.root === true },
      parent,
    );
    // The other direction: each span served points at the one that served it.
    for (const origin of origins) if (origin.isRecording()) origin.addLink({ context: span.spanContext() });
    let running: Promise<T>;
    try {
      running = context.with(trace.setSpan(parent, span), fn);
    } catch (error) {
      fail(span, errorType(error));
      span.end();
      throw error;
    }
    return running.then(
      (result) => {
        try {
          span.setAttributes(clean(options.after?.(result)));
          const failure = options.failure?.(result);
          if (failure !== undefined) fail(span, failure);
        } catch (error) {
          // Describing the result must never change it.
          diag.warn(`countersign: could not describe the result of ${name}`, error);
        } finally {
          span.end();
        }
        return result;
      },
      (error: unknown) => {
        fail(span, errorType(error));
        span.end();
        throw error;
      },
    );
  }

  return {
    serve<T>(req: IncomingMessage, res: ServerResponse, fn: () => Promise<T>): Promise<T> {
      return runServer(req.method ?? 'GET', req.headers, { [ATTR.urlScheme]: 'http' }, fn, () => (res.headersSent ? res.statusCode : undefined));
    },

    serveCheck(method, headers, attributes, fn, statusOf) {
      return runServer(method, headers, clean(attributes), fn, (result) => (result === undefined ? undefined : statusOf(result)));
    },

    annotateRequest(route, attributes) {
      const entry = context.active().getValue(SERVER_SPAN) as ServerEntry | undefined;
      if (entry === undefined) return;
      entry.span.updateName(`${entry.method} ${route}`);
      entry.span.setAttributes(clean(attributes));
    },

    startRequest(req, route, attributes): RequestSpan {
      const method = req.method ?? 'GET';
      const { span, ctx } = startServer(method, req.headers, route === undefined ? method : `${method} ${route}`, clean(attributes));
      requests.set(req, ctx);
      let ended = false;
      return {
        end(statusCode) {
          if (ended) return;
          ended = true;
          endServer(span, statusCode);
        },
      };
    },

    inSpan,

    activeSpan() {
      const span = trace.getActiveSpan();
      return span?.isRecording() ? (span as unknown as SpanRef) : undefined;
    },

    inject(carrier) {
      propagation.inject(context.active(), carrier);
    },

    withPropagation(headers) {
      propagationFields ??= new Set(propagation.fields().map((field) => field.toLowerCase()));
      const fields = propagationFields;
      const out: string[] = [];
      for (let i = 0; i + 1 < headers.length; i += 2) {
        if (!fields.has(headers[i]!.toLowerCase())) out.push(headers[i]!, headers[i + 1]!);
      }
      const carrier: Record<string, string> = {};
      propagation.inject(context.active(), carrier);
      for (const [name, value] of Object.entries(carrier)) out.push(name, value);
      return out;
    },
  };
}
