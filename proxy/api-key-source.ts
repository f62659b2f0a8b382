/**
 * An API key in a configuration file: `api_key_file` (the first line of a file, read when needed,
 * not at load, since the file may be written after the configuration is checked) or, for
 * development only, `api_key` inline, where anyone who can read the configuration can read it.
 * The proxy's own key (`authority:`) and the MCP gate's evaluating key (`mcp.inline:`) are both given so.
 *
 * @example
 *   const Shape = z.object({ url: z.string(), ...API_KEY_FIELDS }).strict().refine(ONE_API_KEY.check, { message: ONE_API_KEY.message });
 *   const key = await readApiKey(config.authority, 'authority', (message) => new ProxyConfigError(message));
 */
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { z } from 'zod';

export const API_KEY_FIELDS = {
  /** One line in a file. */
  api_key_file: z.string().min(1).optional(),
  /** Development only: the key inline, where anyone who can read the config can read it. */
  api_key: z.string().min(1).optional(),
};

export interface ApiKeySource {
  api_key_file?: string | undefined;
  api_key?: string | undefined;
}

/** The refinement every key source carries: exactly one of the two. */
export const ONE_API_KEY = {
  check: (source: ApiKeySource) => (source.api_key_file === undefined) !== (source.api_key === undefined),
  message: 'give exactly one of api_key_file and api_key (api_key inline is for development only)',
} as const;

/**
 * The key: `api_key`, or the first line of `api_key_file` (relative to the working directory).
 * `field` names the source in the error (`authority`, `routes.0.mcp.inline`); `fail` makes it.
 */
export async function readApiKey(source: ApiKeySource, field: string, fail: (message: string) => Error): Promise<string> {
  if (source.api_key !== undefined) return source.api_key;
  const file = source.api_key_file!;
  let text: string;
  try {
    text = await readFile(resolve(file), 'utf8');
  } catch (error) {
    throw fail(`${field}.api_key_file: cannot read ${file}: ${(error as Error).message}`);
  }
  const key = text.split(/\r?\n/, 1)[0]!.trim();
  if (key === '') throw fail(`${field}.api_key_file: ${file} is empty`);
  return key;
}
