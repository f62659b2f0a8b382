/**
 * A small typed client for the authority's API: evaluate, verify, revoke, audit export and the
 * permit JWKS. Used by the tests and by the proxy. Responses are validated with the same zod
 * schemas the server answers with; an error answer becomes a `CountersignApiError` carrying the
 * envelope's code.
 *
 * @example
 *   const client = new CountersignClient({ baseUrl: 'http://127.0.0.1:7070', apiKey: process.env.COUNTERSIGN_API_KEY! });
 *   const decision = await client.evaluate({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: '1' } } });
 *   if (decision.decision === 'allow') await fetch(…, { headers: { 'X-Service-Permit': decision.permit_token! } });
 */
import { Agent, request, type Dispatcher } from 'undici';
import type { z } from 'zod';
import { ErrorEnvelope } from '../wire/envelope.js';
import { EvaluateResponse, type EvaluateAgentRequest, type EvaluateWireRequest } from '../wire/evaluate.js';
import { PermitResponse, VerifyPermitResponse, type VerifyPermitRequest } from '../wire/permits.js';

export interface ClientOptions {
  baseUrl: string;
  apiKey: string;
  /** Per-request timeout; default 10 s. */
  timeoutMs?: number;
  dispatcher?: Dispatcher;
}

/** The authority answered with an error envelope (or could not be reached: code `unreachable`). */
export class CountersignApiError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status: number,
    readonly requestId: string | null,
    readonly retryAfterMs: number | null,
    readonly details: Array<{ path: string; message: string }> = [],
  ) {
    super(message);
    this.name = 'CountersignApiError';
  }
}

export class CountersignClient {
  private readonly dispatcher: Dispatcher;
  private readonly timeoutMs: number;

  constructor(private readonly options: ClientOptions) {
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.dispatcher = options.dispatcher ?? new Agent({ keepAliveTimeout: 30_000, connections: 16 });
  }

  evaluate(body: z.input<typeof EvaluateWireRequest> | z.input<typeof EvaluateAgentRequest>): Promise<EvaluateResponse> {
    return this.call('POST', '/v1/evaluate', EvaluateResponse, body);
  }

  verifyPermit(body: z.input<typeof VerifyPermitRequest>): Promise<VerifyPermitResponse> {
    return this.call('POST', '/v1-verify-permit', VerifyPermitResponse, body);
  }

  async revokePermit(permitId: string, reason?: string): Promise<z.infer<typeof PermitResponse>['permit']> {
    const path = `/v1/permits/${encodeURIComponent(permitId)}/revoke`;
    return (await this.call('POST', path, PermitResponse, reason === undefined ? {} : { reason })).permit;
  }

  async getPermit(permitId: string): Promise<z.infer<typeof PermitResponse>['permit']> {
    return (await this.call('GET', `/v1/permits/${encodeURIComponent(permitId)}`, PermitResponse)).permit;
  }

  /** The signed audit bundle (verify it offline with `countersign audit verify`). */
  exportAudit(range: { from_sequence?: number; to_sequence?: number } = {}): Promise<Record<string, unknown>> {
    return this.call('POST', '/v1/audit/exports', null, range);
  }

  /** The JWKS gates verify permits with. */
  permitKeys(): Promise<{ keys: Array<Record<string, unknown>> }> {
    return this.call('GET', '/v1/permit-keys', null);
  }

  async close(): Promise<void> {
    if (!this.options.dispatcher) await this.dispatcher.close();
  }

  private async call<T>(method: 'GET' | 'POST', path: string, schema: z.ZodType<T> | null, body?: unknown): Promise<T> {
    let response;
    try {
      response = await request(new URL(path, this.options.baseUrl), {
        method,
        dispatcher: this.dispatcher,
        headers: {
          authorization: `Bearer ${this.options.apiKey}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
    } catch (error) {
      throw new CountersignApiError('unreachable', `the authority could not be reached: ${(error as Error).message}`, 0, null, null);
    }
    const text = await response.body.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new CountersignApiError('invalid_response', `the authority answered ${response.statusCode} with a body that is not JSON`, response.statusCode, null, null);
    }
    if (response.statusCode >= 400) {
      const envelope = ErrorEnvelope.safeParse(json);
      if (!envelope.success) throw new CountersignApiError('invalid_response', `HTTP ${response.statusCode}`, response.statusCode, null, null);
      const { error, message, status, request_id, retry_after_ms, details } = envelope.data;
      const retryAfter = retry_after_ms ?? (Number(response.headers['retry-after']) * 1000 || null);
      throw new CountersignApiError(error, message, status, request_id, retryAfter, details ?? []);
    }
    return schema ? schema.parse(json) : (json as T);
  }
}
