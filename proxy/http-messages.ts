/**
 * Reading the proxy's requests and writing its answers: request ids, bounded body reads, which
 * headers cross the proxy (hop-by-hop fields, the permit and x-countersign-* never do), the
 * upgrade request head, and the error envelope on a response or a raw socket.
 *
 * @example
 *   const body = await readBounded(req, route.max_body_bytes); // null: the client went away
 *   sendError(res, requestId, new CountersignError('upstream_unavailable'));
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable, type Duplex } from 'node:stream';
import { CountersignError, errorEnvelope, withErrorHeaders, type ErrorCode } from '../shared/errors.js';

export const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
/**
 * RFC 9110 §7.6.1 hop-by-hop fields, plus (checked apart) the proxy-* family; also `expect` (node
 * answers 100-continue itself) and `host` (undici sends the upstream's; the original goes as x-forwarded-host).
 */
export const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'host']);
export const COUNTERSIGN_HEADERS = new Set(['x-countersign-permit-id', 'x-countersign-mode']);

export function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
}

/**
 * Aborted when the client goes away before its answer was sent (the connection closed): a
 * consume not yet established for it is then not made, or undone (gate.ts).
 */
export function abortedWhenGone(res: ServerResponse): AbortSignal {
  const gone = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  return gone.signal;
}

export function queryOf(target: string): string {
  const question = target.indexOf('?');
  if (question < 0) return '';
  const hash = target.indexOf('#', question);
  return target.slice(question + 1, hash < 0 ? undefined : hash);
}

export function hasBody(req: IncomingMessage): boolean {
  if (req.headers['transfer-encoding'] !== undefined) return true;
  const length = req.headers['content-length'];
  return length !== undefined && length !== '0';
}

export function streamedBody(req: IncomingMessage): Readable | undefined {
  return hasBody(req) ? req : undefined;
}

export interface BufferedBody {
  chunks: Buffer[];
  size: number;
  /** Reading stopped at the limit; the rest is still in `req`. */
  tooLarge: boolean;
}

/**
 * Reads at most `limit` bytes (plus the chunk that crossed it); stops and pauses beyond that.
 * Null when the client went away before the body ended.
 */
export function readBounded(req: IncomingMessage, limit: number): Promise<BufferedBody | null> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return Promise.resolve({ chunks: [], size: 0, tooLarge: true });
  if (!hasBody(req)) return Promise.resolve({ chunks: [], size: 0, tooLarge: false });
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (value: BufferedBody | null) => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('close', onClose);
      req.off('error', onClose);
      resolve(value);
    };
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      if (size > limit) {
        req.pause();
        done({ chunks, size, tooLarge: true });
      }
    };
    const onEnd = () => done({ chunks, size, tooLarge: false });
    const onClose = () => done(null);
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('close', onClose);
    req.on('error', onClose);
  });
}

/** The bytes read so far, then (when reading stopped at the limit: a shadow forward) the rest. */
export function bufferedBody(req: IncomingMessage, body: BufferedBody): Buffer | Readable | undefined {
  if (!body.tooLarge) return body.size === 0 && !hasBody(req) ? undefined : Buffer.concat(body.chunks);
  return Readable.from(
    (async function* () {
      for (const chunk of body.chunks) yield chunk;
      for await (const chunk of req) yield chunk as Buffer;
    })(),
  );
}

/** Invalid or absent JSON is undefined: the facts it should hold are then missing, and the gate refuses. */
export function parseJson(body: BufferedBody): unknown {
  if (body.size === 0) return undefined;
  try {
    return JSON.parse(Buffer.concat(body.chunks).toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

const NOTHING_LISTED: ReadonlySet<string> = new Set();

/** Names listed in `Connection` are hop-by-hop for this one message. */
export function connectionListed(value: string | string[] | undefined): ReadonlySet<string> {
  // The usual values list nothing beyond HOP_BY_HOP: no set to build on every message.
  if (value === undefined || value === 'keep-alive') return NOTHING_LISTED;
  const listed = new Set<string>();
  for (const part of typeof value === 'string' ? [value] : value) {
    for (const token of part.split(',')) {
      const name = token.trim().toLowerCase();
      if (name !== '') listed.add(name);
    }
  }
  return listed;
}

export function isHopByHop(name: string, listed: ReadonlySet<string>): boolean {
  return HOP_BY_HOP.has(name) || name.startsWith('proxy-') || listed.has(name);
}

/** The request's headers as a flat [name, value, …] list (duplicates kept), minus what must not go upstream. */
export function forwardHeaders(req: IncomingMessage, permitHeader: string, requestId: string, added: Record<string, string>): string[] {
  const listed = connectionListed(req.headers.connection);
  const out: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (isHopByHop(name, listed) || name === permitHeader || COUNTERSIGN_HEADERS.has(name)) continue;
    if (name === 'x-forwarded-for' || name === 'x-forwarded-proto' || name === 'x-forwarded-host' || name === 'x-request-id') continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  const client = req.socket.remoteAddress ?? '';
  const priorFor = req.headers['x-forwarded-for'];
  const forwardedFor = appendForwardedFor(priorFor, client);
  if (forwardedFor !== '') out.push('x-forwarded-for', forwardedFor);
  // An ingress in front of the sidecar knows the original scheme and host better than we do.
  out.push('x-forwarded-proto', firstOf(req.headers['x-forwarded-proto']) ?? 'http');
  const host = firstOf(req.headers['x-forwarded-host']) ?? req.headers.host;
  if (host !== undefined && host !== '') out.push('x-forwarded-host', host);
  out.push('x-request-id', requestId);
  for (const name of Object.keys(added)) out.push(name, added[name]!);
  return out;
}

/** The X-Forwarded-For chain the upstream gets: the prior hops (one header or several), then this client. */
function appendForwardedFor(prior: string | string[] | undefined, client: string): string {
  let chain = '';
  for (const part of Array.isArray(prior) ? prior : [prior]) {
    if (part !== undefined && part !== '') chain = chain === '' ? part : `${chain}, ${part}`;
  }
  if (client === '') return chain;
  return chain === '' ? client : `${chain}, ${client}`;
}

/** `headers` (name, value, …) without the `names` (lower case). */
export function withoutHeaders(headers: string[], names: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < headers.length; i += 2) if (!names.includes(headers[i]!.toLowerCase())) out.push(headers[i]!, headers[i + 1]!);
  return out;
}

export function firstOf(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

export function responseHeaders(headers: Record<string, string | string[] | undefined>, requestId: string): Record<string, string | string[]> {
  const listed = connectionListed(headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const name of Object.keys(headers)) {
    const value = headers[name];
    if (value === undefined || isHopByHop(name, listed)) continue;
    out[name] = value;
  }
  out['x-request-id'] = requestId;
  return out;
}

/** The upgrade request as the upstream must see it: Connection and Upgrade kept, the permit header not. */
export function upgradeHead(req: IncomingMessage, path: string, upstreamHost: string, permitHeader: string, requestId: string): string {
  const lines = [`${req.method ?? 'GET'} ${path} HTTP/1.1`];
  const raw = req.rawHeaders;
  let sawHost = false;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (name === permitHeader || COUNTERSIGN_HEADERS.has(name) || name === 'x-request-id') continue;
    if (name === 'host') sawHost = true;
    lines.push(`${raw[i]}: ${raw[i + 1]}`);
  }
  if (!sawHost) lines.push(`Host: ${upstreamHost}`);
  lines.push(`X-Request-ID: ${requestId}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

// ---- answers ----

export function unmatchedError(): CountersignError {
  return new CountersignError('forbidden', 'This path is not a configured route, and unmatched requests are denied.', { reason: 'UNMATCHED_ROUTE' });
}

export function protectedPrefixError(pattern: string): CountersignError {
  return new CountersignError('forbidden', `This path is under the protected subtree ${pattern} and matches no route.`, { reason: 'PROTECTED_PREFIX' });
}

export function sendError(res: ServerResponse, requestId: string, error: CountersignError): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const body = JSON.stringify(errorEnvelope(error, requestId));
  const headers: Record<string, string | number> = withErrorHeaders(error, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    'x-request-id': requestId,
  });
  // An unread request body is not drained: the connection closes instead.
  if (!res.req.complete) headers.connection = 'close';
  res.writeHead(error.status, headers);
  res.end(body);
}

export function rawError(socket: Duplex, requestId: string, error: CountersignError): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const body = JSON.stringify(errorEnvelope(error, requestId));
  const reason = error.code as ErrorCode;
  socket.end(
    `HTTP/1.1 ${error.status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      `X-Request-ID: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
  );
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code !== undefined ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}
