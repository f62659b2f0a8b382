/**
 * The gate's decision for one matched request: derive the bound facts, verify the permit with
 * the one verification core (shared/permits/verify.ts), consume it atomically with appending its
 * `permit.verified` record, and say whether to forward or block. The HTTP server, the forwarding
 * and the metrics live elsewhere; this module decides and records, nothing more.
 *
 * - enforce: forward only after verification succeeded. No permit → 403 `permit_required`; a
 *   refused permit, or a bound fact the request does not carry → 403 `permit_rejected` with the
 *   verification code as `reason`; verification impossible (store or keys failing, body over
 *   `max_body_bytes` on a body-bound route, or a body Envoy's ext_authz did not send whole) → 503
 *   `gate_unavailable`.
 * - shadow: always forward; a refusal comes back as `wouldBlock` (the server counts it).
 * - Tracing on (shared/telemetry): each check is a `countersign.gate.check` span with its verdict
 *   (result, reason, mode, permit id); the consume under it is verify.ts's.
 * - Every refusal, in either mode, appends a `permit.rejected` record to the organization's
 *   verification stream through the record backlog (record-backlog.ts), which holds it while the
 *   store cannot take it and writes it once the store is back. A success appends
 *   `permit.verified` in the same atomic step as the consume (in shadow mode too: the permit was
 *   used, so a replay must fail later as well).
 *
 * @example
 *   const gate = createGate({ organization: config.organization, issuer: config.issuer,
 *     audience: config.audience, keys, store, permitHeader: config.permit_header, records: backlog, executionRecords });
 *   const decision = await gate.check({ route, params, query, headers: req.headers, requestId });
 *   if (decision.action === 'block') return sendError(decision.code, decision.reason);
 *   const started = performance.now();
 *   const status = await forward(req, decision);
 *   executionRecords.add(executionRecord({ route, mode: decision.mode, requestId, // gate-records.ts
 *     permitId: decision.permitId, claims: decision.claims, upstreamStatus: status,
 *     durationMs: performance.now() - started, atMs: Date.now() }));
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { PermitClaims } from '../shared/permits/claims.js';
import { verificationStream } from '../shared/permits/store-keys.js';
import { verifyPermit } from '../shared/permits/verify.js';
import type { PermitKeyResolver } from '../shared/permits/verify.js';
import type { SharedStore } from '../shared/store/types.js';
import { ATTR, SPAN, type SpanAttributes } from '../shared/telemetry/attributes.js';
import { tracing } from '../shared/telemetry/index.js';
import type { ProxyMode, ProxyRoute } from './config.js';
import type { ExecutionRecords } from './execution-records.js';
import { deriveFacts, type DerivedFacts } from './facts.js';
import { gateRecord, type RecordedRoute } from './gate-records.js';
import type { RecordBacklog } from './record-backlog.js';

/** `forbidden`: refused whatever permit came (an MCP method the gate does not understand, a blocked tool). */
export type GateErrorCode = 'permit_required' | 'permit_rejected' | 'gate_unavailable' | 'forbidden';

export interface GateRefusal {
  status: 403 | 503;
  code: GateErrorCode;
  /** Stable and machine-readable: the verification code, or `BODY_TOO_LARGE`. Sent to the caller. */
  reason: string;
  /** The core's code (MISSING_PERMIT, PERMIT_EXPIRED, …); null when the core was not asked. */
  verifyCode: string | null;
  /** For logs and the record: which check refused, naming the fact when one was missing. Never the token. */
  detail: string;
}

export type GateDecision =
  | {
      action: 'forward';
      mode: ProxyMode;
      permitId: string | null;
      claims: PermitClaims | null;
      /** Shadow mode only: what enforce would have answered. */
      wouldBlock: GateRefusal | null;
    }
  | ({
      action: 'block';
      /** Blocks happen in enforce mode only. */
      mode: 'enforce';
      /** Known once the permit's signature was verified; null otherwise. */
      permitId: string | null;
    } & GateRefusal);

export interface GateInput {
  route: ProxyRoute;
  /** From matchRoute. */
  params: Readonly<Record<string, string>>;
  query: URLSearchParams;
  /** node:http's headers (names in lower case). */
  headers: IncomingHttpHeaders;
  /** The parsed JSON body, for routes with `needsBody`. */
  body?: unknown;
  /** The body of a `needsBody` route exceeded `max_body_bytes`, so its facts cannot be read. */
  bodyTooLarge?: boolean;
  /**
   * Envoy's ext_authz did not send the whole body of a `needsBody` route: `none` (not configured
   * to send it), `partial` (cut at its `max_request_bytes`). Its facts cannot be read either.
   */
  bodyNotSent?: 'none' | 'partial';
  requestId: string;
  /**
   * When the front door's caller stops waiting (ms since the epoch, `Date.now`'s clock), less the
   * time the answer needs to reach it: the consume settles before then or is not made.
   */
  deadlineMs?: number;
  /** Aborted when the caller gave up (went away): a consume not yet established is not made, or is undone. */
  signal?: AbortSignal;
}

/**
 * What the verification needs of a route: its name (the records' gate), mode and action type, and
 * for an MCP `tools/call` the tool, which its records name.
 */
export type GateRoute = Pick<ProxyRoute, 'name' | 'mode' | 'action_type'> & Pick<RecordedRoute, 'tool'>;

/**
 * One call decided on facts a front door derived itself (the MCP gate, from a JSON-RPC
 * `tools/call`): the same verification, consume and records as `check`, without reading an HTTP request.
 */
export interface CallCheckInput {
  /** The route's name, with the mode and action type of the call's tool entry. */
  route: GateRoute;
  /** The permit the call carries: undefined when none, null when it carries two that differ. */
  token: string | undefined | null;
  /** Where the permit came from, for the refusal's detail ("the X-Service-Permit header", "params._meta"). */
  tokenSource: string;
  derived: DerivedFacts;
  /** Facts the permit must bind (verify.ts's `required`). */
  required: readonly string[];
  requestId: string;
  deadlineMs?: number;
  signal?: AbortSignal;
}

export interface GateOptions {
  /** The organization this gate serves. */
  organization: string;
  issuer: string;
  audience: string;
  keys: PermitKeyResolver;
  store: SharedStore;
  /** Milliseconds since the epoch; default Date.now. */
  now?: () => number;
  /** The permit header (any case); default `x-service-permit`. */
  permitHeader?: string;
  /**
   * Where `permit.rejected` records go: the process's record backlog (record-backlog.ts), shared
   * with the execution records, which writes in order and holds what the store cannot take.
   */
  records: Pick<RecordBacklog, 'append'>;
  /**
   * The server's batched `execution.observed` records (execution-records.ts). They are flushed
   * into the backlog before a `permit.rejected` is appended, so the stream keeps a permit's records in order.
   */
  executionRecords?: Pick<ExecutionRecords, 'flush'>;
}

export interface Gate {
  check(input: GateInput): Promise<GateDecision>;
  checkCall(input: CallCheckInput): Promise<GateDecision>;
  /**
   * A refusal a front door decided before any permit (an MCP request the gate does not understand,
   * a blocked tool): recorded as `permit.rejected` and answered as any other, a would-block in shadow.
   */
  refuseRequest(input: CheckBase & { refusal: GateRefusal }): Promise<GateDecision>;
}

/** What every check carries, whichever front door derived its facts. */
export type CheckBase = Pick<GateInput, 'requestId' | 'deadlineMs' | 'signal'> & { route: GateRoute };

/** The core refuses anything longer before decoding; so does the unverified `sub` read. */
const MAX_TOKEN_LENGTH = 16 * 1024;

export function createGate(options: GateOptions): Gate {
  const { organization, issuer, audience, keys, store, records } = options;
  const now = options.now ?? Date.now;
  const permitHeader = (options.permitHeader ?? 'x-service-permit').toLowerCase();
  // Throws on a bad organization id at construction, not on the first request.
  const stream = verificationStream(organization);

  async function refuse(
    input: CheckBase,
    nowMs: number,
    refusal: GateRefusal,
    claims: PermitClaims | null,
    actorId: string,
  ): Promise<GateDecision> {
    const mode = input.route.mode;
    // Handed to the backlog before the refusal, which writes in order: an execution still waiting
    // in the batch (this permit's first use, say) reaches the stream before this replay's refusal.
    void options.executionRecords?.flush();
    // Resolves once written or held, never rejects: the decision does not depend on the record. A
    // block stays a block (enforce), and a shadow route keeps forwarding, since shadow must never
    // take the upstream down with the store.
    const appended = records.append([
      gateRecord({
        kind: 'permit.rejected',
        route: input.route,
        mode,
        nowMs,
        requestId: input.requestId,
        permitId: claims?.jti ?? '',
        actionType: input.route.action_type,
        actorId: claims?.sub ?? actorId,
        code: refusal.verifyCode ?? refusal.reason,
        reason: refusal.detail,
      }),
    ]);
    // A 503 means the store is failing: the answer does not wait for it a second time (the
    // verification already took its timeout). Other refusals are on the record (or held) before they are answered.
    if (refusal.status !== 503) await appended;
    if (mode === 'shadow') {
      return { action: 'forward', mode, permitId: claims?.jti ?? null, claims, wouldBlock: refusal };
    }
    return { action: 'block', mode: 'enforce', permitId: claims?.jti ?? null, ...refusal };
  }

  async function check(input: GateInput): Promise<GateDecision> {
    const { route } = input;
    const nowMs = now();
    const token = permitOf(input.headers, permitHeader);

    const unusable = tokenRefusal(token, `the ${permitHeader} header appears more than once`);
    if (unusable !== null) return refuse(input, nowMs, unusable, null, '');
    if (route.mcp !== undefined) {
      // An MCP route's facts are in its JSON-RPC messages, which only the MCP gate reads (mcp/).
      const detail = 'an MCP route is decided by the forwarding proxy, which reads its JSON-RPC messages; this front door cannot';
      return refuse(input, nowMs, { status: 403, code: 'forbidden', reason: 'MCP_ROUTE', verifyCode: null, detail }, null, '');
    }
    if (input.bodyTooLarge === true && route.needsBody) {
      return refuse(
        input,
        nowMs,
        {
          status: 503,
          code: 'gate_unavailable',
          reason: 'BODY_TOO_LARGE',
          verifyCode: null,
          detail: `the body exceeds max_body_bytes (${route.max_body_bytes}), so its bound facts cannot be read`,
        },
        null,
        '',
      );
    }

    if (input.bodyNotSent !== undefined && route.needsBody) {
      const detail =
        input.bodyNotSent === 'partial'
          ? 'Envoy sent only part of the body (x-envoy-auth-partial-body: true), so its bound facts cannot be read'
          : 'the check request carries no body (Envoy sends it with with_request_body, and says so in x-envoy-auth-partial-body), so its bound facts cannot be read';
      const reason = input.bodyNotSent === 'partial' ? 'BODY_TOO_LARGE' : 'BODY_NOT_SENT';
      return refuse(input, nowMs, { status: 503, code: 'gate_unavailable', reason, verifyCode: null, detail }, null, '');
    }

    return verified(input, nowMs, token!, deriveFacts(route, input), []);
  }

  async function checkCall(input: CallCheckInput): Promise<GateDecision> {
    const nowMs = now();
    const unusable = tokenRefusal(input.token, `${input.tokenSource} carry two different permits`);
    if (unusable !== null) return refuse(input, nowMs, unusable, null, '');
    return verified(input, nowMs, input.token!, input.derived, input.required);
  }

  /** The facts checked, the permit verified and consumed with its record, or the refusal recorded. */
  async function verified(input: CheckBase, nowMs: number, token: string, derived: DerivedFacts, required: readonly string[]): Promise<GateDecision> {
    const { route } = input;
    if (!derived.ok) {
      // The request lacks a fact (or carries it twice, or in no canonical form): the caller's
      // doing, not an outage, so a refusal (a bound fact the gate cannot derive refuses, as the
      // binding says), decided before the permit is touched, so it is not consumed.
      return refuse(
        input,
        nowMs,
        rejection('permit_rejected', 'BINDING_MISMATCH', `the gate could not derive the bound fact ${derived.missing}: ${derived.reason}`),
        null,
        '',
      );
    }
    const facts = derived.facts;
    if (derived.actorFromPermit) {
      // actor_id comes from the permit itself. The core needs it among the facts before it has
      // verified anything, so `sub` is read here from the UNVERIFIED payload. That is safe: the
      // core then verifies the signature over exactly these payload bytes and parses `sub` from
      // them again, so a forged `sub` fails as PERMIT_INVALID, and the binding hash (which covers
      // actor_id) holds the permit to the actor the authority evaluated. A payload that does not
      // decode leaves actor_id out; the core refuses such a token before the binding check.
      const sub = unverifiedSubject(token);
      if (sub !== undefined) facts.actor_id = sub;
    }
    const actorId = typeof facts.actor_id === 'string' ? facts.actor_id : '';

    const outcome = await verifyPermit({
      token,
      keys,
      issuer,
      audience,
      orgId: organization,
      nowMs,
      binding: { kind: 'full', facts, required },
      store,
      deadlineMs: input.deadlineMs,
      signal: input.signal,
      record: (claims) => ({
        stream,
        fields: gateRecord({
          kind: 'permit.verified',
          route,
          mode: route.mode,
          nowMs,
          requestId: input.requestId,
          permitId: claims.jti,
          actionType: claims.act,
          actorId: claims.sub,
          code: '',
          reason: '',
        }),
      }),
    });

    if (outcome.valid) {
      return { action: 'forward', mode: route.mode, permitId: outcome.claims.jti, claims: outcome.claims, wouldBlock: null };
    }
    const refusal: GateRefusal = outcome.unavailable
      ? { status: 503, code: 'gate_unavailable', reason: outcome.code, verifyCode: outcome.code, detail: outcome.reason }
      : rejection(outcome.code === 'MISSING_PERMIT' ? 'permit_required' : 'permit_rejected', outcome.code, outcome.reason);
    return refuse(input, nowMs, refusal, outcome.claims, actorId);
  }

  // Tracing on: each check as a span, with the verdict (and the consume under it, verify.ts).
  function traced<I extends CheckBase>(run: (input: I) => Promise<GateDecision>): (input: I) => Promise<GateDecision> {
    return (input) => {
      const on = tracing;
      return on === null ? run(input) : on.inSpan(SPAN.gateCheck, () => run(input), { attributes: checkAttributes(input), after: decisionAttributes });
    };
  }

  return {
    check: traced(check),
    checkCall: traced(checkCall),
    refuseRequest: traced((input: CheckBase & { refusal: GateRefusal }) => refuse(input, now(), input.refusal, null, '')),
  };
}

/** No usable permit: none (undefined or empty), or an ambiguous one (null, `twice` says how). */
function tokenRefusal(token: string | undefined | null, twice: string): GateRefusal | null {
  if (token === undefined || token === '') return rejection('permit_required', 'MISSING_PERMIT', 'no permit was presented');
  if (token === null) return rejection('permit_rejected', 'PERMIT_INVALID', twice);
  return null;
}

function checkAttributes(input: CheckBase): SpanAttributes {
  return { [ATTR.route]: input.route.name, [ATTR.actionType]: input.route.action_type, [ATTR.mode]: input.route.mode, [ATTR.requestId]: input.requestId };
}

/**
 * The verdict: `verified`, `rejected` or `unavailable` (as the verification metric counts it),
 * the reason code of a refusal (a shadow would-block included), and the permit id once known.
 */
function decisionAttributes(decision: GateDecision): SpanAttributes {
  const refusal = decision.action === 'block' ? decision : decision.wouldBlock;
  return {
    [ATTR.mode]: decision.mode,
    [ATTR.verificationResult]: refusal === null ? 'verified' : refusal.status === 503 ? 'unavailable' : 'rejected',
    [ATTR.verificationReason]: refusal?.reason,
    [ATTR.permitId]: decision.permitId ?? undefined,
  };
}

function rejection(code: 'permit_required' | 'permit_rejected', verifyCode: string, detail: string): GateRefusal {
  return { status: 403, code, reason: verifyCode, verifyCode, detail };
}

/** The permit, undefined when absent, null when the header came more than once (ambiguous). */
function permitOf(headers: IncomingHttpHeaders, name: string): string | undefined | null {
  const raw = headers[name];
  if (Array.isArray(raw)) return raw.length === 1 ? raw[0] : raw.length === 0 ? undefined : null;
  return raw;
}

/** `sub` of a compact JWS payload, without verifying anything (see the caller). */
function unverifiedSubject(token: string): string | undefined {
  if (token.length > MAX_TOKEN_LENGTH) return undefined;
  const first = token.indexOf('.');
  const second = first < 0 ? -1 : token.indexOf('.', first + 1);
  if (second < 0) return undefined;
  try {
    const payload: unknown = JSON.parse(Buffer.from(token.slice(first + 1, second), 'base64url').toString('utf8'));
    if (typeof payload !== 'object' || payload === null) return undefined;
    const sub = (payload as Record<string, unknown>).sub;
    return typeof sub === 'string' ? sub : undefined;
  } catch {
    return undefined;
  }
}
