/**
 * Who is calling an inline MCP route (inline-config.ts): the actor id the gate evaluates as, from
 * the request's credential, never from the call's arguments. With `actor.jwt`, the OAuth bearer
 * token of the `Authorization` header verified as a JWT (shared/jwt/verify.ts: signature by the
 * issuer's JWKS, issuer, audience, exp/nbf, asymmetric algorithms only), its `claim`; with
 * `actor.header`, that header, as the trusted hop in front of the gate set it. `actor.prefix` goes
 * before the id either way.
 *
 * An issuer's keys that cannot be loaded (its JWKS URL unreachable, its file unreadable) are
 * `unavailable`: the gate cannot decide, so nothing runs.
 *
 * @example
 *   const identify = callerIdentifier(route.mcp.inline.actor);
 *   const caller = await identify(req.headers);
 *   // { kind: 'actor', actorId: 'agent:7f3c' } | { kind: 'unauthenticated', tokenGiven, detail } | { kind: 'unavailable', detail }
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { JWTPayload } from 'jose';
import { createTokenVerifier, JwksUnavailableError, JwtRejectedError, looksLikeJwt } from '../../shared/jwt/verify.js';
import type { McpInline } from './inline-config.js';

export type CallerIdentity =
  | { kind: 'actor'; actorId: string }
  /** No credential, or one that does not name an actor: a 401. `tokenGiven`: a token came and was refused. */
  | { kind: 'unauthenticated'; tokenGiven: boolean; detail: string }
  /** The issuer's keys could not be loaded: no decision is possible. */
  | { kind: 'unavailable'; detail: string };

/** An actor id is at most this long on the evaluate API. */
const MAX_ACTOR_ID = 256;
/** A bearer token longer than this is refused before it is decoded. */
const MAX_TOKEN_LENGTH = 16 * 1024;

export function callerIdentifier(actor: McpInline['actor']): (headers: IncomingHttpHeaders) => Promise<CallerIdentity> {
  const prefix = actor.prefix ?? '';
  const named = (id: unknown, what: string): CallerIdentity => {
    if (typeof id !== 'string' || id === '') return { kind: 'unauthenticated', tokenGiven: true, detail: `${what} names no actor` };
    const actorId = prefix + id;
    if (actorId.length > MAX_ACTOR_ID) return { kind: 'unauthenticated', tokenGiven: true, detail: `${what} names an actor id longer than ${MAX_ACTOR_ID} characters` };
    return { kind: 'actor', actorId };
  };

  if (actor.header !== undefined) {
    const name = actor.header;
    return async (headers) => {
      const value = headers[name];
      if (value === undefined || value === '') return { kind: 'unauthenticated', tokenGiven: false, detail: `the ${name} header is missing` };
      if (Array.isArray(value)) return { kind: 'unauthenticated', tokenGiven: true, detail: `the ${name} header appears more than once` };
      return named(value, `the ${name} header`);
    };
  }

  const jwt = actor.jwt!;
  // Made on first use, and again after a failure: a JWKS file written after the start is picked up.
  let verifier: Promise<(token: string) => Promise<JWTPayload>> | undefined;
  return async (headers) => {
    const token = bearerOf(headers.authorization);
    if (token === undefined) return { kind: 'unauthenticated', tokenGiven: false, detail: 'no bearer token in the Authorization header' };
    if (token.length > MAX_TOKEN_LENGTH || !looksLikeJwt(token)) return { kind: 'unauthenticated', tokenGiven: true, detail: 'the bearer token is not a JWT' };
    let payload: JWTPayload;
    try {
      verifier ??= createTokenVerifier(jwt);
      payload = await (await verifier)(token);
    } catch (error) {
      if (error instanceof JwtRejectedError) return { kind: 'unauthenticated', tokenGiven: true, detail: `the bearer token is refused: ${error.message}` };
      if (!(error instanceof JwksUnavailableError)) verifier = undefined;
      return { kind: 'unavailable', detail: `the token issuer's keys could not be loaded: ${(error as Error).message}` };
    }
    return named(payload[jwt.claim], `the bearer token's "${jwt.claim}" claim`);
  };
}

/** The token of `Authorization: Bearer <token>` (the scheme in any case), or undefined. */
function bearerOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const match = /^Bearer +(\S+) *$/i.exec(header);
  return match?.[1];
}
