/**
 * `countersign audit verify <bundle.json> --key <public.pem> [--checkpoint <checkpoint.json>
 * [--checkpoint-key <public.pem>]]`: verifies an exported audit bundle offline (no database, no
 * network) and prints the report as JSON. The checkpoint is checked with `--key` unless another
 * key signed it (after a key rotation). Exit code 0 when the bundle is intact, 1 when any problem was found; a wrong invocation
 * throws UsageError (exit 2 in bin/countersign.ts).
 *
 * @example
 *   countersign audit verify export.json --key audit-key.pem --checkpoint checkpoint.json
 *   # {"ok": false, "problems": [{"kind": "removed", "sequence": 42, "message": "event 42 is missing: …"}], …}
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { verifyAuditBundle } from '../audit/verify-bundle.js';
import { UsageError } from './admin-commands.js';

const USAGE =
  'usage: countersign audit verify <bundle.json> --key <public.pem> [--checkpoint <checkpoint.json> [--checkpoint-key <public.pem>]]';

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

/** `argv` is what follows `countersign audit`. Returns the exit code. */
export async function runAuditCommand(argv: string[], io: { out(line: string): void }): Promise<number> {
  const [verb, ...rest] = argv;
  if (verb !== 'verify') throw new UsageError(verb === undefined ? USAGE : `unknown command: audit ${verb}\n${USAGE}`);
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: { key: { type: 'string' }, checkpoint: { type: 'string' }, 'checkpoint-key': { type: 'string' } },
  });
  const [bundlePath, extra] = positionals;
  if (bundlePath === undefined || extra !== undefined) throw new UsageError(USAGE);
  if (values.key === undefined) throw new UsageError(`--key <public.pem> is required\n${USAGE}`);

  if (values['checkpoint-key'] !== undefined && values.checkpoint === undefined) {
    throw new UsageError(`--checkpoint-key needs --checkpoint\n${USAGE}`);
  }
  const publicKeyPem = await readText(values.key, 'public key');
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
      ? verifyAuditBundle(bundle.value, publicKeyPem, options)
      : {
          ok: false,
          problems: [{ kind: 'malformed' as const, sequence: null, message: `${bundlePath} is not JSON: ${bundle.error}` }],
        };
  io.out(JSON.stringify({ bundle: bundlePath, ...report }, null, 2));
  return report.ok ? 0 : 1;
}
