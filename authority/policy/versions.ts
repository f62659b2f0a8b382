/**
 * Policy versions per organization: each PUT stores a new version (and its `policy.updated`
 * audit event, in one transaction) and moves `organizations.policy_version`. Compiled policies
 * are cached by (organization, version), so an evaluation compiles nothing; the version to use
 * comes with the credential's organization row, so it costs no extra query either.
 *
 * @example
 *   const policies = new PolicyVersions(db, clock);
 *   const current = await policies.current(principal.org); // { id, version, compiled } | null
 */
import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { z } from 'zod';
import { CountersignError } from '../../shared/errors.js';
import type { PolicyRecord } from '../../shared/wire/policies.js';
import { appendAuditEvent } from '../audit/chain.js';
import type { Organization } from '../orgs/organizations.js';
import type { Db, Queryable } from '../store/db.js';
import type { Clock } from '../time.js';
import { compilePolicy } from './compile.js';
import type { CompiledPolicy, PolicyError } from './types.js';

export type PolicyFormat = 'yaml' | 'json';

export interface PolicyVersion {
  id: string;
  orgId: string;
  version: number;
  document: unknown;
  source: string;
  format: PolicyFormat;
  createdBy: string;
  createdAt: Date;
}

export interface CurrentPolicy {
  id: string;
  version: number;
  compiled: CompiledPolicy;
}

interface PolicyRow {
  id: string;
  org_id: string;
  version: number;
  document: unknown;
  source: string;
  format: PolicyFormat;
  created_by: string;
  created_at: Date;
}

const fromRow = (row: PolicyRow): PolicyVersion => ({
  id: row.id,
  orgId: row.org_id,
  version: row.version,
  document: row.document,
  source: row.source,
  format: row.format,
  createdBy: row.created_by,
  createdAt: row.created_at,
});

/** A document that does not compile; `errors` carry paths and positions. */
export class PolicyInvalidError extends CountersignError {
  constructor(readonly errors: PolicyError[]) {
    super('invalid_request', 'the policy document is invalid', {
      details: errors.map((error) => ({
        path: error.path,
        message: error.message,
        ...(error.line !== null ? { line: error.line } : {}),
        ...(error.column !== null ? { column: error.column } : {}),
      })),
    });
  }
}

/** `purpose: 'stored'` for a version already accepted: newer bounds deny per condition, never fail the load. */
export function compileOrThrow(source: string, format: PolicyFormat, purpose: 'write' | 'stored' = 'write'): CompiledPolicy {
  const result = compilePolicy(source, format, { purpose });
  if (!result.ok) throw new PolicyInvalidError(result.errors);
  return result.policy;
}

export class PolicyVersions {
  /**
   * Compiled versions by `org:version`. `fetch` loads a missing one once: the evaluations that ask
   * for it meanwhile (after a start or a policy change) wait for that load instead of each
   * compiling the same version on the event loop. A PUT caching the version it stored does not
   * abort a load under way (ignoreFetchAbort); a failed load is not kept.
   */
  private readonly compiled = new LRUCache<string, CurrentPolicy, { orgId: string; version: number }>({
    max: 1_000,
    ignoreFetchAbort: true,
    fetchMethod: async (_key, _stale, { context }) => (await this.load(context.orgId, context.version)) ?? undefined,
  });

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  /** The organization's policy at its current version; null when it has none. */
  async current(org: Pick<Organization, 'id' | 'policyVersion'>): Promise<CurrentPolicy | null> {
    if (org.policyVersion === null) return null;
    const context = { orgId: org.id, version: org.policyVersion };
    return (await this.compiled.fetch(compiledKey(org.id, org.policyVersion), { context })) ?? null;
  }

  private async load(orgId: string, policyVersion: number): Promise<CurrentPolicy | null> {
    const version = await this.get(orgId, policyVersion);
    if (!version) return null;
    return { id: version.id, version: version.version, compiled: compileOrThrow(version.source, version.format, 'stored') };
  }

  async get(orgId: string, version: number): Promise<PolicyVersion | null> {
    const rows = await this.db.query<PolicyRow>('SELECT * FROM policies WHERE org_id = $1 AND version = $2', [orgId, version]);
    return rows[0] ? fromRow(rows[0]) : null;
  }

  async history(orgId: string): Promise<Array<Pick<PolicyVersion, 'id' | 'version' | 'createdBy' | 'createdAt'>>> {
    const rows = await this.db.query<PolicyRow>(
      'SELECT id, version, created_by, created_at FROM policies WHERE org_id = $1 ORDER BY version DESC LIMIT 100',
      [orgId],
    );
    return rows.map((row) => ({ id: row.id, version: row.version, createdBy: row.created_by, createdAt: row.created_at }));
  }

  /** Stores a new version inside `tx` (with its audit event); throws PolicyInvalidError when it does not compile. */
  async put(
    tx: Queryable,
    input: { orgId: string; source: string; format: PolicyFormat; createdBy: string; requestId: string | null },
  ): Promise<PolicyVersion> {
    const compiled = compileOrThrow(input.source, input.format);
    const now = new Date(this.clock.now());
    // The organization row is the lock: concurrent PUTs get consecutive versions.
    const [org] = await tx.query<{ policy_version: number | null }>('SELECT policy_version FROM organizations WHERE id = $1 FOR UPDATE', [input.orgId]);
    const version = (org?.policy_version ?? 0) + 1;
    const rows = await tx.query<PolicyRow>(
      `INSERT INTO policies (id, org_id, version, document, source, format, created_by, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *`,
      [randomUUID(), input.orgId, version, compiled.document, input.source, input.format, input.createdBy, now],
    );
    await tx.query('UPDATE organizations SET policy_version = $2 WHERE id = $1', [input.orgId, version]);
    const stored = fromRow(rows[0] as PolicyRow);
    await appendAuditEvent(
      tx,
      {
        orgId: input.orgId,
        type: 'policy.updated',
        actorId: input.createdBy,
        decision: null,
        resourceType: 'policy',
        resourceId: stored.id,
        requestId: input.requestId,
        credential: input.createdBy,
        occurredAt: now,
        details: { version, format: input.format },
      },
      now,
    );
    this.compiled.set(compiledKey(input.orgId, version), { id: stored.id, version, compiled });
    return stored;
  }
}

export function policyToWire(version: PolicyVersion): z.infer<typeof PolicyRecord> {
  return {
    id: version.id,
    version: version.version,
    format: version.format,
    document: version.document,
    source: version.source,
    created_by: version.createdBy,
    created_at: version.createdAt.toISOString(),
  };
}

/** The key of a compiled version in PolicyVersions's cache: the load and the PUT must agree on it. */
function compiledKey(orgId: string, version: number): string {
  return `${orgId}:${version}`;
}
