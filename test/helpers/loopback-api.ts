/**
 * A client of a test authority over real loopback HTTP (`app.listen` on 127.0.0.1 and `fetch`):
 * every answer is checked against the OpenAPI document (problems collected in `problems`), bodies
 * are sent as given (`body` as JSON, `raw` as is), and the acme admin key is the credential unless
 * told.
 *
 * @example
 *   const { call, problems } = await loopbackApi(authority);
 *   const reply = await call('POST', '/access/v1/evaluation', { body: request, requestId: 'r-1' });
 *   t.same(problems, [], 'every answer is one the OpenAPI document describes');
 */
import { openApiDocument } from '../../authority/openapi/document.js';
import type { TestAuthority } from './authority.js';
import { OpenApiResponses } from './openapi-responses.js';

export interface Reply {
  status: number;
  text: string;
  body: any;
  headers: Headers;
}

export interface CallOptions {
  /** The bearer credential; null sends none. The admin key of acme unless given. */
  token?: string | null;
  body?: unknown;
  raw?: string;
  contentType?: string;
  requestId?: string;
}

export async function loopbackApi(authority: TestAuthority) {
  const base = await authority.app.listen({ host: '127.0.0.1', port: 0 });
  const responses = new OpenApiResponses(openApiDocument(authority.app));
  const problems: string[] = [];
  const call = async (method: string, path: string, options: CallOptions = {}): Promise<Reply> => {
    const headers: Record<string, string> = {};
    const token = options.token === undefined ? authority.acmeAdmin : options.token;
    if (token !== null) headers.authorization = `Bearer ${token}`;
    if (options.requestId !== undefined) headers['x-request-id'] = options.requestId;
    let payload: string | undefined;
    if (options.raw !== undefined || options.body !== undefined) {
      headers['content-type'] = options.contentType ?? 'application/json';
      payload = options.raw ?? JSON.stringify(options.body);
    }
    const response = await fetch(`${base}${path}`, { method, headers, body: payload });
    const text = await response.text();
    const body: unknown = (response.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : text;
    // A path or method the document has no operation for (a 405, say) is not checked.
    if (responses.locate(method, path) !== null) problems.push(...responses.check({ method, url: path, status: response.status, body }));
    return { status: response.status, text, body, headers: response.headers };
  };
  return { base, call, problems };
}
