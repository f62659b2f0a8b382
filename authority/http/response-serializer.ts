/**
 * Answers as JSON text, each checked on the way out against its route's zod response schema (the
 * wire contract in shared/wire/): an answer that breaks the contract is a
 * ResponseSerializationError, answered 500 in the error envelope, never sent malformed.
 *
 * fastify-type-provider-zod's own serializer checks with zod's `encode`, which parses every value
 * that has checks twice, its whole subtree included (a first pass without the checks, then the
 * checks and the parse again): on evaluate's answer it costs about 4× zod's `parse`. Both give
 * the same value for a schema without the parts whose encoding differs from their parsing
 * (transforms, pipes and codecs, defaults, prefaults, catches, lazy schemas, checks that overwrite
 * a value such as `.trim()`), so a route whose schema has none of them is checked with `parse`,
 * and any other keeps `encode`.
 *
 * @example
 *   app.setSerializerCompiler(responseSerializerCompiler);
 */
import type { FastifySerializerCompiler } from 'fastify';
import { ResponseSerializationError } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { $ZodType } from 'zod/v4/core';

/** Schema kinds that `encode` runs differently from `parse` (zod 4's backward direction). */
const DIRECTIONAL = new Set(['transform', 'pipe', 'default', 'prefault', 'catch', 'success', 'lazy', 'promise']);

interface ZodDef {
  type: string;
  checks?: Array<{ _zod: { def: { check?: string } } }>;
}

function isSchema(value: unknown): value is $ZodType {
  if (typeof value !== 'object' || value === null || !('_zod' in value)) return false;
  const def = (value as { _zod: { def?: { type?: unknown } } })._zod.def;
  return typeof def?.type === 'string';
}

/** The schemas a definition's field holds: itself, an array's (options, items) or an object shape's. */
function schemasIn(value: unknown): $ZodType[] {
  if (isSchema(value)) return [value];
  if (Array.isArray(value)) return value.filter(isSchema);
  if (typeof value === 'object' && value !== null && !('_zod' in value)) return Object.values(value).filter(isSchema);
  return [];
}

/** Whether `encode` may give another value, or another verdict, than `parse` for some input. */
export function encodeDiffersFromParse(schema: $ZodType, seen: Set<$ZodType> = new Set()): boolean {
  if (seen.has(schema)) return false;
  seen.add(schema);
  const def = schema._zod.def as unknown as ZodDef;
  if (DIRECTIONAL.has(def.type)) return true;
  if (def.checks?.some((check) => check._zod.def.check === 'overwrite')) return true;
  return Object.values(def).some((field) => schemasIn(field).some((inner) => encodeDiffersFromParse(inner, seen)));
}

export const responseSerializerCompiler: FastifySerializerCompiler<unknown> = ({ schema, method, url }) => {
  if (!isSchema(schema)) throw new TypeError(`the response schema of ${method} ${url} is not a zod schema`);
  const check = encodeDiffersFromParse(schema) ? (data: unknown) => z.safeEncode(schema, data) : (data: unknown) => z.safeParse(schema, data);
  return (data: unknown): string => {
    const result = check(data);
    if (!result.success) throw new ResponseSerializationError(method, url, { cause: result.error });
    return JSON.stringify(result.data);
  };
};
