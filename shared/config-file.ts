/**
 * What the authority's and the proxy's configuration files have in common: a YAML mapping read
 * from a file, environment variables that override top-level keys, `host:port` addresses, and
 * error messages that name every bad field by its dotted path.
 *
 * @example
 *   const fromFile = await readConfigMapping('proxy.yaml', (message) => new ProxyConfigError(message));
 *   const merged = withEnvOverrides(fromFile, [['REDIS_URL', 'redis_url']], process.env);
 */
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

/** `127.0.0.1:7070`, `[::1]:7070`, `host.internal:7070` → `{host, port}`. */
export function hostPort(example: string) {
  return z
    .string()
    .regex(/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, { message: `expected host:port, such as ${example}` })
    .transform((value) => {
      const at = value.lastIndexOf(':');
      const host = value.slice(0, at).replace(/^\[(.*)\]$/, '$1');
      return { host, port: Number(value.slice(at + 1)) };
    })
    .refine((address) => address.port <= 65535, { message: 'port must be at most 65535' });
}

/** Every issue on its own line, as `  dotted.path: message`. */
export function formatIssues(source: string, error: z.ZodError): string {
  const lines = error.issues.map((issue) => {
    const path = issue.path.length > 0 ? issue.path.join('.') : '(root)';
    return `  ${path}: ${issue.message}`;
  });
  return `${source} is invalid:\n${lines.join('\n')}`;
}

/** The file's top-level mapping (an empty file is an empty mapping); `fail` makes the caller's error type. */
export async function readConfigMapping(file: string, fail: (message: string) => Error): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(resolve(file), 'utf8');
  } catch (error) {
    throw fail(`cannot read ${file}: ${(error as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = parseYaml(text);
  } catch (error) {
    throw fail(`${file} is not valid YAML: ${(error as Error).message}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) throw fail(`${file} must hold a mapping`);
  return parsed as Record<string, unknown>;
}

/** A copy of `base` with each set (non-empty) variable of `overrides` written to its key. */
export function withEnvOverrides(
  base: Record<string, unknown>,
  overrides: ReadonlyArray<readonly [env: string, key: string]>,
  env: NodeJS.ProcessEnv,
): Record<string, unknown> {
  const merged = { ...base };
  for (const [name, key] of overrides) {
    const value = env[name];
    if (value !== undefined && value !== '') merged[key] = value;
  }
  return merged;
}
