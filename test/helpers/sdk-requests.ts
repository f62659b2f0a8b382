/**
 * The requests the public AtlaSent SDKs (`@atlasent/sdk` for TypeScript, `atlasent` for Python)
 * send for their calls, byte for byte in path, method, headers and body, as their client sources
 * build them; and a loopback client that sends them to a running authority and checks every
 * answer against its OpenAPI document. Tests drive the authority with these shapes, not with our
 * own client, so an SDK call works exactly when its test passes.
 *
 * @example
 *   const sdk = await sdkLoopback(authority);
 *   const reply = await sdk.send(SDK.ts.verifyPermitById(token));
 */
import { randomUUID } from 'node:crypto';
import { openApiDocument } from '../../authority/openapi/document.js';
import type { TestAuthority } from './authority.js';
import { OpenApiResponses } from './openapi-responses.js';

export interface SdkRequest {
  method: 'GET' | 'POST';
  /** Path and query, as the SDK builds them (ids through encodeURIComponent / quote(safe='')). */
  path: string;
  body?: unknown;
  /** `text/event-stream` for the streaming calls. */
  accept?: string;
}

const enc = encodeURIComponent;

/** What each SDK call sends. `apiKey` is the key the client was built with (some calls echo it in the body). */
export const SDK = {
  ts: {
    evaluate: (action_type: string, actor_id: string, context: Record<string, unknown> = {}): SdkRequest => ({ method: 'POST', path: '/v1-evaluate', body: { action_type, actor_id, context } }),
    /** evaluatePreflight({agent, action, context}): the canonical names, and the trace asked for in the query. */
    evaluatePreflight: (action: string, agent: string, context: Record<string, unknown> = {}): SdkRequest => ({
      method: 'POST',
      path: '/v1-evaluate?include=constraint_trace',
      body: { action_type: action, actor_id: agent, context },
    }),
    /** evaluatePreflight of the 2.2 client, which posted its input as given: the legacy `{action, agent}` names. */
    evaluatePreflightLegacy: (action: string, agent: string, context: Record<string, unknown> = {}): SdkRequest => ({
      method: 'POST',
      path: '/v1-evaluate?include=constraint_trace',
      body: { agent, action, context },
    }),
    /** The deprecated verifyPermit({permitId}): the SDK's permitId is the permit token. */
    verifyPermit: (permitId: string): SdkRequest => ({ method: 'POST', path: '/v1-verify-permit', body: { permit_token: permitId, action_type: '', actor_id: '' } }),
    verifyPermitById: (permitId: string): SdkRequest => ({ method: 'POST', path: `/v1/permits/${enc(permitId)}/verify`, body: {} }),
    getPermit: (permitId: string): SdkRequest => ({ method: 'GET', path: `/v1/permits/${enc(permitId)}` }),
    revokePermitById: (permitId: string, reason?: string): SdkRequest => ({
      method: 'POST',
      path: `/v1/permits/${enc(permitId)}/revoke`,
      body: reason === undefined ? {} : { reason },
    }),
    /** The deprecated revokePermit({permitId, reason}). */
    revokePermit: (permitId: string, apiKey: string, reason?: string): SdkRequest => ({
      method: 'POST',
      path: '/v1-revoke-permit',
      body: { decision_id: permitId, reason: reason ?? '', api_key: apiKey },
    }),
    listAuditEvents: (types: string): SdkRequest => ({ method: 'GET', path: `/v1-audit/events?${new URLSearchParams({ types }).toString()}` }),
    createAuditExport: (filter: { types?: string; actor_id?: string; from?: string; to?: string }): SdkRequest => ({ method: 'POST', path: '/v1-audit/exports', body: filter }),
    /** protectStream({agent, action, context}) after its first path (`/v1/evaluate/stream`) answered 404. */
    protectStream: (action: string, agent: string, apiKey: string, context: Record<string, unknown> = {}): SdkRequest => ({
      method: 'POST',
      path: '/v1-evaluate-stream',
      body: { action, agent, context, api_key: apiKey },
      accept: 'text/event-stream',
    }),
  },
  py: {
    evaluatePreflight: (action_type: string, actor_id: string, context: Record<string, unknown> = {}): SdkRequest => ({
      method: 'POST',
      path: '/v1-evaluate?include=constraint_trace',
      body: { action_type, actor_id, context },
    }),
    verifyPermitById: (permitId: string): SdkRequest => ({ method: 'POST', path: `/v1/permits/${enc(permitId)}/verify`, body: {} }),
    revokePermit: (permitId: string, apiKey: string, reason?: string): SdkRequest => ({
      method: 'POST',
      path: '/v1-revoke-permit',
      body: { decision_id: permitId, reason: reason ?? '', api_key: apiKey },
    }),
    createAuditExport: (types: string): SdkRequest => ({ method: 'POST', path: '/v1-audit/exports', body: { types } }),
  },
} as const;

export interface SdkReply {
  status: number;
  headers: Headers;
  text: string;
  body: any;
}

/** A client of `authority` over loopback HTTP that sends the SDK's headers with each request. */
export async function sdkLoopback(authority: TestAuthority, apiKey = authority.acmeAdmin) {
  const base = await authority.app.listen({ host: '127.0.0.1', port: 0 });
  const responses = new OpenApiResponses(openApiDocument(authority.app));
  const problems: string[] = [];
  const send = async (request: SdkRequest, key = apiKey): Promise<SdkReply> => {
    const headers: Record<string, string> = {
      Accept: request.accept ?? 'application/json',
      Authorization: `Bearer ${key}`,
      'User-Agent': `@atlasent/sdk/2.15.0 node/${process.version}`,
      'X-Request-ID': randomUUID(),
      'X-AtlaSent-Protocol-Version': '1',
    };
    if (request.method === 'POST') headers['Content-Type'] = 'application/json';
    const response = await fetch(`${base}${request.path}`, {
      method: request.method,
      headers,
      ...(request.method === 'POST' ? { body: JSON.stringify(request.body) } : {}),
    });
    const text = await response.text();
    const body: unknown = (response.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : text;
    if ((response.headers.get('content-type') ?? '').includes('json') && responses.locate(request.method, request.path) !== null) {
      problems.push(...responses.check({ method: request.method, url: request.path, status: response.status, body }));
    }
    return { status: response.status, headers: response.headers, text, body };
  };
  return { base, send, problems };
}
