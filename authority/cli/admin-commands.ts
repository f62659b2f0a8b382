/**
 * `countersign migrate | orgs … | keys …`: administration of the database (DATABASE_URL, or the
 * embedded data directory). While a server holds the embedded data directory, the command is run
 * by that server (running-server.ts); when it cannot be, opening the directory fails with
 * DATA_DIR_LOCKED, which bin/countersign.ts turns into exit 3 and what to do instead. Every
 * command prints JSON on stdout; `migrate` also says on stderr what it did.
 *
 * @example
 *   countersign migrate            # {"applied": ["0001_foundation", …]}, then {"applied": []}
 *   countersign orgs create --name acme --plan business
 *   countersign keys create --org acme --name ci --scopes evaluate:write,verify:execute
 */
import { parseArgs } from 'node:util';
import { UsageError } from '../../shared/usage-error.js';
import { loadAuthorityConfig } from '../config.js';
import { parseAdminInput, type AdminCommand } from './admin-operations.js';
import { runAdminCommandOn } from './running-server.js';

export interface CliIo {
  out(line: string): void;
  /** Messages for a person (stderr for the real command); machine-readable output stays on `out`. */
  err?(line: string): void;
  /** Where DATABASE_URL and COUNTERSIGN_* come from (process.env for the real command). */
  env: NodeJS.ProcessEnv;
}

const list = (value: string | undefined): string[] =>
  value === undefined ? [] : value.split(',').map((item) => item.trim()).filter(Boolean);

const print = (io: CliIo, value: unknown) => io.out(JSON.stringify(value, null, 2));

type OptionSpec = NonNullable<Parameters<typeof parseArgs>[0]>['options'];

const CONFIG = { config: { type: 'string' } } as const;
/** Each command accepts its own options only: a misspelt or misplaced one is a usage error. */
const OPTIONS: Record<string, OptionSpec> = {
  migrate: CONFIG,
  'orgs create': { ...CONFIG, name: { type: 'string' }, plan: { type: 'string' }, test: { type: 'boolean' } },
  'orgs list': CONFIG,
  'keys create': { ...CONFIG, org: { type: 'string' }, name: { type: 'string' }, scopes: { type: 'string' }, 'allowed-cidrs': { type: 'string' }, actors: { type: 'string' }, 'expires-at': { type: 'string' } },
  'keys list': { ...CONFIG, org: { type: 'string' } },
  'keys revoke': { ...CONFIG, org: { type: 'string' } },
};

/** The command's input, from its options, in the form admin-operations.ts checks. */
function inputOf(command: Exclude<AdminCommand, 'keys rotate-signing'>, text: (name: string) => string | undefined, values: Record<string, unknown>, positionals: string[]): unknown {
  switch (command) {
    case 'migrate':
    case 'orgs list':
      return {};
    case 'orgs create':
      return { name: text('name'), plan: text('plan'), test: values.test === true };
    case 'keys create':
      return {
        org: text('org'),
        name: text('name'),
        scopes: list(text('scopes')),
        allowedCidrs: text('allowed-cidrs') === undefined ? undefined : list(text('allowed-cidrs')),
        allowedActors: text('actors') === undefined ? undefined : list(text('actors')),
        expiresAt: text('expires-at'),
      };
    case 'keys list':
      return { org: text('org') };
    case 'keys revoke': {
      const [id, extra] = positionals;
      if (!id) throw new UsageError('KEY_ID is required: the id of the key to revoke (from keys list)');
      if (extra !== undefined) throw new UsageError(`unexpected argument '${extra}': revoke one key at a time`);
      return { org: text('org'), id };
    }
  }
}

/** `argv` is what follows `countersign`: `['keys', 'create', '--org', 'acme', …]`. */
export async function runAdminCommand(argv: string[], io: CliIo): Promise<void> {
  const [group, verb] = argv;
  const command = group === 'migrate' ? 'migrate' : `${group ?? ''} ${verb ?? ''}`.trim();
  const options = OPTIONS[command];
  if (!options) throw new UsageError(`unknown command: ${command}`);
  const parsed = parseArgs({ args: argv.slice(command.split(' ').length), allowPositionals: command === 'keys revoke', strict: true, options });
  const values = parsed.values as Record<string, string | boolean | undefined>;
  const text = (name: string) => values[name] as string | undefined;
  const known = command as Exclude<AdminCommand, 'keys rotate-signing'>;
  // Checked before the database is opened: a missing option costs nothing and changes nothing.
  const input = parseAdminInput(known, inputOf(known, text, values, parsed.positionals));
  const config = await loadAuthorityConfig({ file: text('config'), env: io.env });
  const output = await runAdminCommandOn(config, known, input, { notify: io.err });
  if (command === 'migrate') {
    const { applied } = output as { applied: string[] };
    io.err?.(applied.length === 0 ? 'the schema is up to date: no migration to apply' : `applied ${applied.length} migration${applied.length === 1 ? '' : 's'}: ${applied.join(', ')}`);
  }
  print(io, output);
}
