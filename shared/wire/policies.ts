/**
 * Policy authoring on the wire: `GET /v1/policies`, `PUT /v1/policies`,
 * `POST /v1/policies/validate`. A document is sent either as text (`source`, YAML or JSON, so
 * comments and positions survive) or as a JSON object (`document`).
 *
 * @example
 *   PUT /v1/policies  { "source": "version: 1\naction_classes: …", "format": "yaml" }
 *   PUT /v1/policies  { "document": { "version": 1, "action_classes": [ … ] } }
 */
import { z } from 'zod';

export const PolicySubmission = z.union([
  z.object({ source: z.string().min(1).max(60_000), format: z.enum(['yaml', 'json']).default('yaml') }).strict(),
  z.object({ document: z.record(z.string(), z.unknown()) }).strict(),
]);
export type PolicySubmission = z.infer<typeof PolicySubmission>;

/** The text and format to store for a submission. */
export function submissionSource(submission: PolicySubmission): { source: string; format: 'yaml' | 'json' } {
  return 'document' in submission ? { source: JSON.stringify(submission.document, null, 2), format: 'json' } : submission;
}

export const PolicyRecord = z.object({
  id: z.string(),
  version: z.number().int(),
  format: z.enum(['yaml', 'json']),
  document: z.unknown(),
  source: z.string(),
  created_by: z.string(),
  created_at: z.string(),
});

export const PolicyResponse = z.object({
  policy: PolicyRecord.nullable(),
  versions: z.array(z.object({ id: z.string(), version: z.number().int(), created_by: z.string(), created_at: z.string() })),
});

/** `GET /v1/policies/versions/:version`: one stored version, current or not (its source included, for a diff). */
export const PolicyVersionParams = z.object({ version: z.coerce.number().int().min(1) });
export const PolicyVersionResponse = z.object({ policy: PolicyRecord });

export const PolicyValidationResponse = z.object({
  valid: z.boolean(),
  errors: z.array(z.object({ path: z.string(), message: z.string(), line: z.number().nullable(), column: z.number().nullable() })),
});
