/**
 * Organizations: the tenants every credential, policy and record belongs to.
 *
 * @example
 *   const org = await createOrganization(db, { name: 'acme', plan: 'business' }, systemClock);
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { PLANS, type Plan } from '../config.js';
import type { Queryable } from '../store/db.js';
import type { Clock } from '../time.js';

export interface Organization {
  id: string;
  name: string;
  plan: Plan;
  isTest: boolean;
  createdAt: Date;
  /** The current policy version; null until a policy is loaded (evaluate then denies: NO_POLICY). */
  policyVersion: number | null;
}

export interface OrganizationRow {
  id: string;
  name: string;
  plan: Plan;
  is_test: boolean;
  created_at: Date;
  policy_version: number | null;
}

export const organizationFromRow = (row: OrganizationRow): Organization => ({
  id: row.id,
  name: row.name,
  plan: row.plan,
  isTest: row.is_test,
  createdAt: row.created_at,
  policyVersion: row.policy_version,
});

const COLUMNS = 'id, name, plan, is_test, created_at, policy_version';

export const OrganizationName = z
  .string()
  .regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, { message: 'lowercase letters, digits, ".", "_" and "-", at most 63' });

export const NewOrganization = z.object({
  name: OrganizationName,
  plan: z.enum(PLANS).default('community'),
  isTest: z.boolean().default(false),
});

export async function createOrganization(
  db: Queryable,
  input: z.input<typeof NewOrganization>,
  clock: Clock,
): Promise<Organization> {
  const { name, plan, isTest } = NewOrganization.parse(input);
  const rows = await db.query<OrganizationRow>(
    `INSERT INTO organizations (id, name, plan, is_test, created_at) VALUES ($1, $2, $3, $4, $5)
     RETURNING ${COLUMNS}`,
    [randomUUID(), name, plan, isTest, new Date(clock.now())],
  );
  return organizationFromRow(rows[0] as OrganizationRow);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** By id, or by name (for the CLI, where names are easier to type). */
export async function findOrganization(db: Queryable, idOrName: string): Promise<Organization | null> {
  const rows = UUID.test(idOrName)
    ? await db.query<OrganizationRow>(`SELECT ${COLUMNS} FROM organizations WHERE id = $1`, [idOrName])
    : await db.query<OrganizationRow>(`SELECT ${COLUMNS} FROM organizations WHERE name = $1`, [idOrName]);
  return rows[0] ? organizationFromRow(rows[0]) : null;
}

export async function listOrganizations(db: Queryable): Promise<Organization[]> {
  const rows = await db.query<OrganizationRow>(
    `SELECT ${COLUMNS} FROM organizations ORDER BY created_at, name`,
  );
  return rows.map(organizationFromRow);
}

export function organizationToJson(org: Organization): Record<string, unknown> {
  return {
    id: org.id,
    name: org.name,
    plan: org.plan,
    is_test: org.isTest,
    policy_version: org.policyVersion,
    created_at: org.createdAt.toISOString(),
  };
}
