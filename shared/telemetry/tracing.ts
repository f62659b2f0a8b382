/**
 * What the rest of the product sees of tracing: the `tracing` object index.ts holds while tracing
 * is on, implemented by sdk.ts. Kept apart from both so that the implementation, loaded on demand,
 * does not import the module that loads it.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { SpanAttributes } from './attributes.js';

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
