/**
 * The Envoy external authorizer's decision for one request, whatever the transport: the request's
 * method, target, headers and (for a body-bound route) body go through the same placement as the
 * forwarding server's (placement.ts) and the same gate (gate.ts), and come back as a verdict the
 * transport encodes (grpc-server.ts, http-server.ts). One gate, several front doors.
 *
 * - allow: Envoy forwards. A gated route's request gets `x-countersign-mode` and, when a permit
 *   was verified (not a shadow would-block), `x-countersign-permit-id`; the permit header is
 *   removed, and so is any `x-countersign-*` header the client sent that the gate does not set,
 *   so the upstream can trust them (as behind the forwarding server).
 * - deny: the error envelope with the refusal's status (403, 503, and 400 for an ambiguous path).
 * - shadow: allow, with the would-be refusal counted and recorded by the gate, as the proxy does.
 * - Body facts: Envoy sends the body only with `with_request_body`, and says whether it is whole
 *   in `x-envoy-auth-partial-body` (envoyBodySent). A request without a body is read as the
 *   forwarding server reads it (its facts are absent: 403); one whose body Envoy did not send
 *   cannot be read (503 `BODY_NOT_SENT`); `true` means it was cut (503 `BODY_TOO_LARGE`), as is a
 *   body over the route's `max_body_bytes`.
 * - A caller that gave up spends nothing: the transport's deadline, less the answer's margin
 *   (consumeDeadline), and its cancellation go to the gate's consume.
 * - Envoy forwards, so there is no upstream answer to observe: no `execution.observed` record.
 * - Tracing on (shared/telemetry): each check is a server span joining the trace of the request it
 *   describes, named after its route; the gate's check and the consume are its children. Envoy
 *   propagates the trace to the upstream itself, so the answer adds no `traceparent`.
 *
 * @example
 *   const check = createExtAuthzCheck({ current: () => state, gate, metrics, logger });
 *   const verdict = await check.decide('grpc', { method: 'POST', target: '/echo/1', headers, requestId, body });
 *   if (verdict?.allow) okResponse(verdict.set, verdict.remove); else deniedResponse(verdict.error);
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import { CountersignError } from '../../shared/errors.js';
import { ATTR } from '../../shared/telemetry/attributes.js';
import { tracing } from '../../shared/telemetry/index.js';
import type { ProxyConfig } from '../config.js';
import type { FactSource } from '../fact-sources.js';
import type { Gate, GateInput } from '../gate.js';
import { COUNTERSIGN_HEADERS, parseJson, queryOf, REQUEST_ID, type BufferedBody } from '../http-messages.js';
import { countVerification, UNMATCHED_ROUTE, type ExtAuthzTransport, type ProxyMetrics, type RequestOutcome } from '../metrics.js';
import { METHOD_OVERRIDE_HEADERS } from '../paths.js';
import { placeRequest, type GateState } from '../placement.js';

/** Envoy's header on a check request that carries the body: `true` when it was cut short. */
export const PARTIAL_BODY_HEADER = 'x-envoy-auth-partial-body';

/** What Envoy sent of the body: all of it (possibly empty), part of it, or nothing at all. */
export type EnvoyBody = { sent: 'whole'; body: BufferedBody } | { sent: 'partial' } | { sent: 'none' };

/** When the transport's caller stops waiting, and its cancellation. */
export interface CallerLimits {
  /** When the caller stops waiting (ms since the epoch, `Date.now`'s clock); absent: it said nothing. */
  deadlineMs?: number;
  /** Aborted when the caller gave up (cancelled the call, closed the connection). */
  signal: AbortSignal;
}

export interface ExtAuthzRequest extends CallerLimits {
  /** The client's method. */
  method: string;
  /** The client's request target (path and query) as Envoy saw it, any path_prefix taken off. */
  target: string;
  /** The client's headers, names in lower case, without pseudo-headers (`:authority` is `host`). */
  headers: IncomingHttpHeaders;
  requestId: string;
  /** The body, read (at most `limit` bytes) only for a route that binds body facts; null: the caller left. */
  body(limit: number): Promise<EnvoyBody | null>;
}

export type ExtAuthzVerdict =
  /** Forward, setting `set` on the request and removing the `remove` headers. */
  | { allow: true; set: Record<string, string>; remove: string[] }
  | { allow: false; error: CountersignError };

export interface ExtAuthzCheckOptions {
  /** A getter, so that a reload reaches every front door in one step. */
  current: () => GateState;
  gate: Gate;
  metrics: ProxyMetrics;
  logger: Logger;
}

export interface ExtAuthzCheck {
  /** The verdict for one request; null when the caller went away while its body was read. */
  decide(transport: ExtAuthzTransport, request: ExtAuthzRequest): Promise<ExtAuthzVerdict | null>;
  /** Refuses a check request that does not describe an HTTP request (counted as `refused_ambiguous`). */
  refuseMalformed(transport: ExtAuthzTransport, error: CountersignError): ExtAuthzVerdict;
}

export function createExtAuthzCheck(options: ExtAuthzCheckOptions): ExtAuthzCheck {
  const { current, gate, metrics, logger } = options;

  function observe(transport: ExtAuthzTransport, route: string, outcome: RequestOutcome, started: number): void {
    metrics.requests.inc({ route, outcome });
    metrics.requestDuration.observe({ route }, (performance.now() - started) / 1000);
    metrics.extAuthzChecks.inc({ transport, outcome });
    tracing?.annotateRequest(route, { [ATTR.route]: route, [ATTR.outcome]: outcome });
  }

  function decide(transport: ExtAuthzTransport, request: ExtAuthzRequest): Promise<ExtAuthzVerdict | null> {
    // Tracing on: a server span in the trace of the request the check describes, the gate's check its child.
    const traced = tracing;
    if (traced === null) return decideUntraced(transport, request);
    return traced.serveCheck(request.method, request.headers, { [ATTR.frontDoor]: `ext_authz_${transport}`, [ATTR.requestId]: request.requestId }, () => decideUntraced(transport, request), (verdict) =>
      verdict === null ? undefined : verdict.allow ? 200 : verdict.error.status,
    );
  }

  async function decideUntraced(transport: ExtAuthzTransport, request: ExtAuthzRequest): Promise<ExtAuthzVerdict | null> {
    const started = performance.now();
    const { requestId, headers } = request;
    const state = current();
    const permitHeader = state.config.permit_header;
    const placed = placeRequest(state, request.method, request.target, headers, { upgrade: headers.upgrade !== undefined });
    if (placed.kind === 'refuse') {
      observe(transport, placed.route, placed.outcome, started);
      return { allow: false, error: placed.error };
    }
    if (placed.kind === 'pass') {
      observe(transport, UNMATCHED_ROUTE, 'passthrough', started);
      // Forwarded untouched but for what is the gate's alone: the permit and the x-countersign-* headers.
      return { allow: true, set: {}, remove: [permitHeader, ...COUNTERSIGN_HEADERS] };
    }

    const { route, params, target } = placed;
    const input: GateInput = { route, params, query: new URLSearchParams(queryOf(target)), headers, requestId, signal: request.signal };
    if (request.deadlineMs !== undefined) input.deadlineMs = consumeDeadline(request.deadlineMs);
    if (route.needsBody) {
      const got = await request.body(route.max_body_bytes);
      if (got === null) return null;
      if (got.sent === 'whole') {
        input.bodyTooLarge = got.body.tooLarge;
        if (!got.body.tooLarge) input.body = parseJson(got.body);
      } else {
        input.bodyNotSent = got.sent;
      }
    }
    const checkStarted = performance.now();
    const decision = await gate.check(input);
    metrics.verificationDuration.observe({ route: route.name }, (performance.now() - checkStarted) / 1000);
    countVerification(metrics, route, decision);

    const context = { request_id: requestId, route: route.name, front_door: `ext_authz_${transport}` };
    if (decision.action === 'block') {
      logger.info({ code: decision.code, reason: decision.reason, detail: decision.detail, ...context }, 'request blocked');
      observe(transport, route.name, 'blocked', started);
      return { allow: false, error: new CountersignError(decision.code, decision.detail, { reason: decision.reason }) };
    }
    if (decision.wouldBlock !== null) {
      logger.info({ code: decision.wouldBlock.code, reason: decision.wouldBlock.reason, ...context }, 'shadow: would have blocked');
    }
    const permitted = decision.wouldBlock === null && decision.permitId !== null;
    const set: Record<string, string> = { 'x-countersign-mode': decision.mode };
    const remove = [permitHeader];
    // Set or removed, never both: Envoy applies removals after additions.
    if (permitted) set['x-countersign-permit-id'] = decision.permitId!;
    else remove.push('x-countersign-permit-id');
    observe(transport, route.name, decision.wouldBlock !== null ? 'would_block' : 'allowed', started);
    return { allow: true, set, remove };
  }

  function refuseMalformed(transport: ExtAuthzTransport, error: CountersignError): ExtAuthzVerdict {
    observe(transport, UNMATCHED_ROUTE, 'refused_ambiguous', performance.now());
    return { allow: false, error };
  }

  return { decide, refuseMalformed };
}

/** Of the time a caller gives a check, this share is kept for the answer's way back to it… */
const ANSWER_MARGIN_SHARE = 0.2;
/** …and at least this much (ms): the gate's refusal, the encoding, the loopback hop. */
const ANSWER_MARGIN_MIN_MS = 10;

/**
 * The deadline the gate's consume must meet (GateInput.deadlineMs) for its answer to reach, in
 * time, a caller that waits until `callerDeadlineMs`: a fifth of the time left is kept for the way
 * back. With Envoy's default 200 ms, the consume settles within 160 ms (the store's script refuses
 * to run after three quarters of that, redis.ts) and the answer has 40 ms to arrive.
 */
export function consumeDeadline(callerDeadlineMs: number, nowMs = Date.now()): number {
  return callerDeadlineMs - Math.max(ANSWER_MARGIN_MIN_MS, (callerDeadlineMs - nowMs) * ANSWER_MARGIN_SHARE);
}

/** Envoy's x-request-id (it sets one on every request unless told not to), or a new one. */
export function requestIdFrom(headers: IncomingHttpHeaders): string {
  const given = headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
}

/**
 * What Envoy says it sent of the body, from `x-envoy-auth-partial-body`, which it adds to every
 * check that carries a body it buffered (`with_request_body`), and only to those:
 *
 * - `false`: the whole body; anything else: part of it.
 * - Absent, for a request without a body (Envoy buffers nothing when the request ends with its
 *   headers): `content-length: 0`, or neither `content-length` nor `transfer-encoding`. That is a
 *   whole, empty body, as the forwarding server reads it. Over HTTP, `content-length` is the
 *   length of the body Envoy sent (0 when it sent none).
 * - Absent while the headers announce a body: Envoy was not configured to send it, or the flag
 *   was filtered out (both must fail the same way: a body that might be partial cannot bind facts).
 */
export function envoyBodySent(headers: IncomingHttpHeaders): 'whole' | 'partial' | 'none' {
  const flag = headers[PARTIAL_BODY_HEADER];
  if (flag === 'false') return 'whole';
  if (flag !== undefined) return 'partial';
  const length = headers['content-length'];
  const bodiless = length === '0' || (length === undefined && headers['transfer-encoding'] === undefined);
  return bodiless ? 'whole' : 'none';
}

/** A complete body (bytes Envoy sent) as the gate reads it, marked too large past `limit`. */
export function wholeBody(bytes: Buffer, limit: number): BufferedBody {
  return { chunks: [bytes], size: bytes.length, tooLarge: bytes.length > limit };
}

/**
 * The client headers the gate reads, so the ones an HTTP-transport Envoy must list in
 * `allowed_headers` (the gRPC transport sends every header): the permit header, every header a
 * route binds, the request id, the body flag, and the method-override headers the gate refuses.
 */
export function headersEnvoyMustSend(config: Pick<ProxyConfig, 'permit_header' | 'routes'>): string[] {
  const names = new Set([config.permit_header]);
  const add = (source: FactSource) => {
    if (source.kind === 'header') names.add(source.name);
  };
  for (const route of config.routes) {
    for (const fact of route.facts) {
      if (fact.kind === 'target') {
        add(fact.type);
        add(fact.id);
      } else {
        add(fact.source);
      }
    }
  }
  return [...names, 'x-request-id', PARTIAL_BODY_HEADER, ...METHOD_OVERRIDE_HEADERS];
}
