/**
 * `countersign audit verify <bundle.json> (--keys <keys.json> | --authority <URL> | --key <public.pem>)
 * [--checkpoint <checkpoint.json> [--checkpoint-key <public.pem>]]`: verifies an exported audit
 * bundle and prints the report as JSON.
 *
 * The key is picked by the bundle's `signing_key_id` from a key set: `--keys` (the saved answer of
 * GET /v1/audit/keys, or a JWKS) or `--authority` (fetched from URL/v1/audit/keys with the API key
 * in COUNTERSIGN_API_KEY or --api-key, scope audit:read). After a rotation the newest key has
 * signed nothing yet, so taking the first key of the set would report every older bundle as
 * tampered. `--key` gives one PEM instead; when it is not the key the bundle names, the report
 * says which kid to use. The checkpoint's key is picked the same way (by its own signing_key_id)
 * unless `--checkpoint-key` names it. Offline except for `--authority`.
 *
 * Exit code 0 when the bundle is intact, 1 when any problem was found or the key set could not be
 * fetched; a wrong invocation or an unreadable key set throws UsageError (exit 2 in bin/countersign.ts).
 *
 * @example
 *   curl -s -H "Authorization: Bearer $KEY" $AUTHORITY/v1/audit/keys > audit-keys.json
 *   countersign audit verify export.json --keys audit-keys.json --checkpoint checkpoint.json
 *   countersign audit verify export.json --authority https://authority.internal   # COUNTERSIGN_API_KEY set
 *   # {"ok": false, "problems": [{"kind": "removed", "sequence": 42, "message": "event 42 is missing: …"}], …}
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { AuditKeySetError, parseAuditKeySet, type AuditKeySet } from '../audit/key-set.js';
import { verifyAuditBundle } from '../audit/verify-bundle.js';
import { UsageError } from '../../shared/usage-error.js';

const USAGE =
  'usage: countersign audit verify BUNDLE (--keys FILE | --authority URL [--api-key KEY] | --key PEM) [--checkpoint FILE [--checkpoint-key PEM]]';

/** The key set could not be fetched from the authority (exit 1: not the invocation's fault). */
export class AuditKeysUnavailableError extends Error {
  readonly code = 'AUDIT_KEYS_UNAVAILABLE';
}

async function readText(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read the ${what} ${path}: ${(error as Error).message}`);
  }
}

/** A file that is not JSON is a finding about that file, not a crash. */
function parseJson(text: string): { value: unknown } | { error: string } {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch (error) {
    return { error: (error as Error).message };
  }
}

function keySetFrom(value: unknown, source: string, wrap: (message: string) => Error): AuditKeySet {
  try {
    return parseAuditKeySet(value);
  } catch (error) {
    if (error instanceof AuditKeySetError) throw wrap(`${source}: ${error.message}`);
    throw error;
  }
}

async function readKeySet(path: string): Promise<AuditKeySet> {
  const parsed = parseJson(await readText(path, 'key set'));
  if ('error' in parsed) throw new UsageError(`the key set ${path} is not JSON: ${parsed.error}`);
  return keySetFrom(parsed.value, path, (message) => new UsageError(message));
}

/** GET <authority>/v1/audit/keys; the API key is sent only when there is one. */
async function fetchKeySet(authority: string, apiKey: string | undefined): Promise<AuditKeySet> {
  let url: URL;
  try {
    url = new URL('v1/audit/keys', authority.endsWith('/') ? authority : `${authority}/`);
  } catch {
    throw new UsageError(`--authority ${authority} is not a URL`);
  }
  const unavailable = (why: string) => new AuditKeysUnavailableError(`cannot fetch the audit keys from ${url.href}: ${why}`);
  let response: Response;
  try {
    response = await fetch(url, { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {}, signal: AbortSignal.timeout(10_000) });
  } catch (error) {
    throw unavailable((error as Error).message);
  }
  if (response.status === 401 || response.status === 403) {
    throw unavailable(`${response.status}: set COUNTERSIGN_API_KEY (or --api-key) to an API key with scope audit:read`);
  }
  if (!response.ok) throw unavailable(`the authority answered ${response.status}`);
  let body: unknown;
  try {
    body = await response.json();
  } catch (error) {
    throw unavailable(`the answer is not JSON (${(error as Error).message})`);
  }
  return keySetFrom(body, url.href, (message) => unavailable(message));
}

/** `argv` is what follows `countersign audit`. Returns the exit code. */
export async function runAuditCommand(argv: string[], io: { out(line: string): void; env?: NodeJS.ProcessEnv }): Promise<number> {
  const [verb, ...rest] = argv;
  if (verb !== 'verify') throw new UsageError(verb === undefined ? USAGE : `unknown command: audit ${verb}\n${USAGE}`);
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      key: { type: 'string' },
      keys: { type: 'string' },
      authority: { type: 'string' },
      'api-key': { type: 'string' },
      checkpoint: { type: 'string' },
      'checkpoint-key': { type: 'string' },
    },
  });
  const [bundlePath, extra] = positionals;
  if (bundlePath === undefined || extra !== undefined) throw new UsageError(USAGE);
  const sources = (['keys', 'authority', 'key'] as const).filter((name) => values[name] !== undefined);
  if (sources.length === 0) throw new UsageError(`the verification key is required: --keys FILE, --authority URL or --key PEM\n${USAGE}`);
  if (sources.length > 1) throw new UsageError(`give one of --keys, --authority and --key, not ${sources.map((name) => `--${name}`).join(' and ')}\n${USAGE}`);
  if (values['api-key'] !== undefined && values.authority === undefined) throw new UsageError(`--api-key goes with --authority\n${USAGE}`);
  if (values['checkpoint-key'] !== undefined && values.checkpoint === undefined) {
    throw new UsageError(`--checkpoint-key needs --checkpoint\n${USAGE}`);
  }

  const env = io.env ?? process.env;
  const key =
    values.keys !== undefined
      ? await readKeySet(values.keys)
      : values.authority !== undefined
        ? await fetchKeySet(values.authority, values['api-key'] ?? (env.COUNTERSIGN_API_KEY || undefined))
        : await readText(values.key as string, 'public key');
  const checkpointKeyPem = values['checkpoint-key'] === undefined ? undefined : await readText(values['checkpoint-key'], 'checkpoint key');
  const bundle = parseJson(await readText(bundlePath, 'bundle'));
  let checkpoint: unknown;
  if (values.checkpoint !== undefined) {
    const parsed = parseJson(await readText(values.checkpoint, 'checkpoint'));
    // A checkpoint that cannot be read cannot vouch for anything: reported as a checkpoint problem.
    checkpoint = 'value' in parsed ? parsed.value : `not JSON: ${parsed.error}`;
  }

  const options = { ...(checkpoint === undefined ? {} : { checkpoint }), ...(checkpointKeyPem === undefined ? {} : { checkpointPublicKeyPem: checkpointKeyPem }) };
  const report =
    'value' in bundle
      ? verifyAuditBundle(bundle.value, key, options)
      : {
          ok: false,
          problems: [{ kind: 'malformed' as const, sequence: null, message: `${bundlePath} is not JSON: ${bundle.error}` }],
        };
  io.out(JSON.stringify({ bundle: bundlePath, ...report }, null, 2));
  return report.ok ? 0 : 1;
}
