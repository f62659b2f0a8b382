/**
 * The one permit verification core. The proxy (before forwarding) and the authority's
 * `POST /v1-verify-permit` both call `verifyPermit`, so a permit is checked by the same code in
 * the same order everywhere:
 *
 *   missing → parse → alg/typ/kid → key by kid → signature → claims → iss/aud → org → exists
 *   → nbf/exp → binding → epoch fence → revocation → consume (with the verification record)
 *
 * The Ed25519 check runs on the event loop with libsodium where it loads (ed25519.ts); with
 * node:crypto, on the event loop while few verifications are in flight and on libuv's thread pool
 * once several are (`signatureOn`, see signatureRunsOnPool). The steps up to the organization
 * live in signed-claims.ts, which the authority's permit routes also use on their own.
 *
 * Each refusal has a stable code (`VERIFY_ERROR_CODES`); reasons are for humans only. It never
 * throws and never answers valid when something could not be established: a failing store, key
 * resolver or lookup yields `INTERNAL_ERROR` with `unavailable: true` (the proxy answers 503,
 * verify-permit answers INTERNAL_ERROR). Tokens are never logged or echoed. With tracing on
 * (shared/telemetry), the consume is a `countersign.permit.consume` span of the caller's.
 *
 * @example
 *   const outcome = await verifyPermit({
 *     token: req.headers['x-service-permit'],
 *     keys: staticKeyResolver(jwks),
 *     issuer: 'https://authority.example',
 *     audience: DEFAULT_PERMIT_AUDIENCE,
 *     orgId: 'org_1',
 *     nowMs: Date.now(),
 *     binding: { kind: 'full', facts: { action_type: 'deploy.production', actor_id: 'ci', environment: 'prod' } },
 *     store,
 *     record: (claims) => ({ stream: verificationStream(claims.org), fields: { permit_id: claims.jti } }),
 *   });
 *   if (!outcome.valid) refuse(outcome.code, outcome.reason);
 */
import type { Ed25519Engine } from './ed25519.js';
import { StoreError } from '../store/store-errors.js';
import type { PermitConsumption, RecordAppend, SharedStore } from '../store/types.js';
import {
  BindingFactError,
  OPTIONAL_STANDARD_FACTS,
  bindingHash,
  bindingHashesEqual,
  factOf,
} from './binding.js';
import { PERMIT_LEEWAY_SECONDS, issuedAtMs, type PermitClaims } from './claims.js';
import { signedPermitClaims, type PermitKeyResolver } from './signed-claims.js';
import { permitStoreKey, replayEpochKey } from './store-keys.js';
import { ATTR, SPAN } from '../telemetry/attributes.js';
import { tracing } from '../telemetry/index.js';

import type { VerifyErrorCode } from './verify-codes.js';

export { VERIFY_ERROR_CODES, type VerifyErrorCode } from './verify-codes.js';
export { MAX_TOKEN_LENGTH, type PermitKeyResolver, type PermitVerificationKey } from './signed-claims.js';

export type PermitBinding =
  /**
   * The gate derived the action's facts: the binding hash is recomputed. `required` names facts
   * the permit must bind besides its own choice (the MCP gate's `arguments_digest`): a permit that
   * does not bind one of them does not cover this exact request, so it is refused before the consume.
   */
  | { kind: 'full'; facts: Record<string, unknown>; required?: readonly string[] }
  /** Only the action type and actor are known; empty strings mean "not given". */
  | { kind: 'partial'; actionType?: string; actorId?: string };

export interface VerifyPermitOptions {
  token: string | undefined;
  keys: PermitKeyResolver;
  /** The authority's issuer (`iss`). */
  issuer: string;
  /** This gate's audience (`aud`), default DEFAULT_PERMIT_AUDIENCE. */
  audience: string;
  /** The organization this gate serves. */
  orgId: string;
  nowMs: number;
  /** Default PERMIT_LEEWAY_SECONDS. */
  leewaySeconds?: number;
  binding: PermitBinding;
  /**
   * What the authority's own records say of this permit (verify-permit looks it up; the proxy
   * cannot): unknown permits are refused, and so are those recorded as consumed or revoked, even
   * if the replay store has lost that fact.
   */
  permitStatus?: (claims: PermitClaims) => Promise<RecordedPermitStatus>;
  store: SharedStore;
  /** The verification record appended atomically with consumption (success only). */
  record?: (claims: PermitClaims) => RecordAppend;
  /** Where the signature check runs; default 'auto' (see signatureRunsOnPool). */
  signatureOn?: SignatureOn;
  /**
   * The longest the consume may take; a consume reaching the store later changes nothing, so a
   * permit whose verification timed out stays usable. Default: the store's command timeout.
   */
  consumeTimeoutMs?: number;
  /**
   * When the caller stops waiting (ms since the epoch, `Date.now`'s clock): the consume settles
   * before then, and one reaching the store later changes nothing (ConsumeOptions.deadlineMs).
   */
  deadlineMs?: number;
  /** Aborted when the caller gave up: no consume is made after that, and one landing late is undone. */
  signal?: AbortSignal;
}

/** `unknown`: no record; `issued`: usable as far as the records go (expiry is checked apart). */
export type RecordedPermitStatus = 'unknown' | 'issued' | 'consumed' | 'revoked';

/**
 * Where the Ed25519 signature check runs: 'event-loop' (synchronously), 'thread-pool' (libuv's
 * pool, as WebCrypto does), or 'auto', which picks per verification (signatureRunsOnPool).
 */
export type SignatureOn = 'auto' | 'event-loop' | 'thread-pool';

/** With this many verifications in flight in the process (this one included), 'auto' uses the pool. */
export const POOL_WHEN_IN_FLIGHT = 3;

/**
 * Whether a signature check goes to libuv's thread pool. Under load, yes: the event loop is what
 * runs out (the proxy's is busy parsing, consuming and forwarding other requests), and another
 * core can verify meanwhile; on the 2-core bench machine that gave the proxy about 20 % more
 * enforced requests per second (docs/architecture.md, "Signature checks"). When little is in
 * flight, no: the hop between threads would cost more CPU than it saves (about 100 µs more per
 * request at 1,000 requests/s there), and nothing waits for the event loop anyway.
 *
 * With libsodium (ed25519.ts) 'auto' stays on the event loop: its check costs about what the hop
 * to the pool and back does, and it has no asynchronous form.
 *
 * @example
 *   signatureRunsOnPool('auto', 1); // false: the only verification in flight
 *   signatureRunsOnPool('auto', POOL_WHEN_IN_FLIGHT); // true
 *   signatureRunsOnPool('auto', POOL_WHEN_IN_FLIGHT, 'sodium-native'); // false
 */
export function signatureRunsOnPool(on: SignatureOn, inFlight: number, engine: Ed25519Engine = 'node:crypto'): boolean {
  if (on === 'auto') return engine === 'node:crypto' && inFlight >= POOL_WHEN_IN_FLIGHT;
  return on === 'thread-pool';
}

/** Verifications started and not yet finished in this process, for 'auto'. */
let verificationsInFlight = 0;

export type VerifyOutcome =
  /** A valid permit has been consumed: every permit is single use. */
  | { valid: true; claims: PermitClaims; binding: 'full' | 'partial'; consumed: true }
  | {
      valid: false;
      code: VerifyErrorCode;
      reason: string;
      /** Set once the signature was verified and the claims parsed. */
      claims: PermitClaims | null;
      /** Verification could not be established (store, keys or lookup failed): fail closed. */
      unavailable?: true;
    };

export async function verifyPermit(options: VerifyPermitOptions): Promise<VerifyOutcome> {
  verificationsInFlight += 1;
  try {
    return await verify(options);
  } catch {
    // A bug or a bad option must not turn into an exception a caller might not fail closed on.
    return internal('the permit could not be verified because of an internal error', null);
  } finally {
    verificationsInFlight -= 1;
  }
}

async function verify(options: VerifyPermitOptions): Promise<VerifyOutcome> {
  const { token } = options;
  if (token === undefined || token === '') return refuse('MISSING_PERMIT', 'no permit was presented', null);
  const leewayMs = leewayOf(options) * 1000;
  if (!Number.isFinite(options.nowMs)) throw new RangeError('nowMs must be finite');

  const signed = await signedPermitClaims(token, {
    keys: options.keys,
    issuer: options.issuer,
    audience: options.audience,
    orgId: options.orgId,
    onPool: (engine) => signatureRunsOnPool(options.signatureOn ?? 'auto', verificationsInFlight, engine),
  });
  if (!signed.ok) return { valid: false, ...signed.refusal };
  const claims = signed.claims;

  if (options.permitStatus) {
    let status: RecordedPermitStatus;
    try {
      status = await options.permitStatus(claims);
    } catch {
      return internal('the permit record could not be looked up', claims);
    }
    if (status === 'revoked') return refuse('PERMIT_REVOKED', 'the permit has been revoked', claims);
    if (status === 'consumed') return refuse('PERMIT_ALREADY_USED', 'the permit has already been used', claims);
    if (status !== 'issued') return refuse('PERMIT_NOT_FOUND', 'the authority has no record of this permit', claims);
  }

  if (claims.nbf * 1000 > options.nowMs + leewayMs) return refuse('PERMIT_NOT_YET_VALID', 'the permit is not valid yet', claims);
  if (claims.exp * 1000 <= options.nowMs - leewayMs) return refuse('PERMIT_EXPIRED', 'the permit has expired', claims);

  const bindingRefusal = checkBinding(claims, options.binding);
  if (bindingRefusal) return bindingRefusal;

  // The epoch fence, revocation, then consume, in one atomic step of the store (every permit is
  // single use: the claims schema demands one: true). The marker must outlive every moment a gate
  // would still accept the permit.
  const ttlMs = Math.max(1, claims.exp * 1000 + leewayMs - options.nowMs);
  let consumption: PermitConsumption;
  try {
    // Tracing on: the store's round trip as a span of its own.
    const traced = tracing;
    consumption = await (traced === null
      ? consume(options, claims, ttlMs)
      : traced.inSpan(SPAN.consume, () => consume(options, claims, ttlMs), {
          attributes: { [ATTR.permitId]: claims.jti },
          after: (result) => ({ [ATTR.consumeResult]: result }),
        }));
  } catch (error) {
    if (error instanceof StoreError && error.code === 'STORE_ABANDONED') {
      return internal('the caller gave up before the permit was consumed; it was not used', claims);
    }
    return internal('the revocation and replay state could not be read and updated', claims);
  }
  if (consumption === 'state_reset') {
    return refuse('REPLAY_STATE_RESET', 'the replay store lost its state after this permit was issued, so its use cannot be checked; evaluate again', claims);
  }
  if (consumption === 'revoked') return refuse('PERMIT_REVOKED', 'the permit has been revoked', claims);
  if (consumption === 'already_used') return refuse('PERMIT_ALREADY_USED', 'the permit has already been used', claims);

  return { valid: true, claims, binding: options.binding.kind, consumed: true };
}

/** The epoch fence, revocation and consume, with the verification record, in one step of the store. */
function consume(options: VerifyPermitOptions, claims: PermitClaims, ttlMs: number): Promise<PermitConsumption> {
  return options.store.consumePermit(permitStoreKey(claims.org, claims.jti), ttlMs, options.record?.(claims), {
    fence: { epochKey: replayEpochKey(claims.org), issuedAtMs: issuedAtMs(claims) },
    timeoutMs: options.consumeTimeoutMs,
    deadlineMs: options.deadlineMs,
    signal: options.signal,
  });
}

/** Null when the binding holds, else the refusal. */
function checkBinding(claims: PermitClaims, binding: PermitBinding): VerifyOutcome | null {
  if (binding.kind === 'partial') {
    if (binding.actionType && binding.actionType !== claims.act) {
      return refuse('ACTION_TYPE_MISMATCH', 'the permit is for another action type', claims);
    }
    if (binding.actorId && binding.actorId !== claims.sub) {
      return refuse('ACTOR_MISMATCH', 'the permit is for another actor', claims);
    }
    return null;
  }

  const facts = binding.facts;
  const actionType = factOf(facts, 'action_type');
  if (actionType === undefined) return refuse('BINDING_MISMATCH', 'the gate could not derive the bound fact action_type', claims);
  if (actionType !== claims.act) return refuse('ACTION_TYPE_MISMATCH', 'the permit is for another action type', claims);
  const actorId = factOf(facts, 'actor_id');
  if (actorId === undefined) return refuse('BINDING_MISMATCH', 'the gate could not derive the bound fact actor_id', claims);
  if (actorId !== claims.sub) return refuse('ACTOR_MISMATCH', 'the permit is for another actor', claims);

  for (const name of binding.required ?? []) {
    if (!claims.bkeys.includes(name)) return refuse('BINDING_MISMATCH', `the permit does not bind ${name}, which this gate requires`, claims);
  }
  // Null prototype: a bound name such as "__proto__" must reach bindingHash (which refuses it)
  // instead of silently changing the object's prototype.
  const picked: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  for (const name of claims.bkeys) {
    const value = factOf(facts, name);
    if (value === undefined) return refuse('BINDING_MISMATCH', `the gate could not derive the bound fact ${name}`, claims);
    picked[name] = value;
  }
  // A standard fact the request carries but the permit did not bind was absent when the action
  // was authorized (say, no environment), so the permit does not cover this request.
  for (const name of OPTIONAL_STANDARD_FACTS) {
    if (factOf(facts, name) !== undefined && !claims.bkeys.includes(name)) {
      return refuse('BINDING_MISMATCH', `the request carries ${name}, which the permit does not bind`, claims);
    }
  }

  let expected: string;
  try {
    expected = bindingHash(claims.org, picked);
  } catch (error) {
    if (error instanceof BindingFactError) {
      return refuse('BINDING_MISMATCH', `the bound fact ${error.fact} has no canonical form`, claims);
    }
    throw error;
  }
  if (!bindingHashesEqual(expected, claims.bnd)) {
    return refuse('BINDING_MISMATCH', 'the request does not match the facts the permit is bound to', claims);
  }
  return null;
}

function leewayOf(options: VerifyPermitOptions): number {
  const leeway = options.leewaySeconds ?? PERMIT_LEEWAY_SECONDS;
  if (!Number.isFinite(leeway) || leeway < 0) throw new RangeError('leewaySeconds must be a finite number >= 0');
  return leeway;
}

function refuse(code: VerifyErrorCode, reason: string, claims: PermitClaims | null): VerifyOutcome {
  return { valid: false, code, reason, claims };
}

function internal(reason: string, claims: PermitClaims | null): VerifyOutcome {
  return { valid: false, code: 'INTERNAL_ERROR', reason, claims, unavailable: true };
}
