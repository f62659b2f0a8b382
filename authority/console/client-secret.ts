/**
 * Reads the console's OIDC client secret at start, so a missing file stops the start with a
 * configuration error rather than the first sign-in.
 *
 * @example
 *   const secret = await readConsoleClientSecret(config, process.env); // undefined for a public client
 */
import { readFile } from 'node:fs/promises';
import { ConfigError } from '../config.js';
import type { ConsoleConfig } from './config.js';

/**
 * The console's OIDC client secret: COUNTERSIGN_CONSOLE_CLIENT_SECRET, else the file
 * console.oidc.client_secret_file names (trimmed), else none (a public client, PKCE alone).
 */
export async function readConsoleClientSecret(
  config: { console: Pick<ConsoleConfig, 'oidc'> },
  env: NodeJS.ProcessEnv,
): Promise<string | undefined> {
  if (config.console.oidc === undefined) return undefined;
  const fromEnv = env.COUNTERSIGN_CONSOLE_CLIENT_SECRET;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  const file = config.console.oidc.client_secret_file;
  if (file === undefined) return undefined;
  try {
    return (await readFile(file, 'utf8')).trim();
  } catch (error) {
    throw new ConfigError(`console.oidc.client_secret_file: ${file} could not be read: ${(error as Error).message}`);
  }
}
