/**
 * Renders the command catalogue (bin/catalogue.ts): the top-level help, one command's help, the
 * short usage printed after a usage error, and docs/cli.md. Also the version and the "did you
 * mean" suggestion.
 *
 * @example
 *   console.log(commandHelp(findCommand('keys create')!)); // usage, options, examples
 *   suggest('kyes', topLevelNames()); // 'keys'
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { COMMANDS, ENVIRONMENT, EXIT_CODES, subcommandsOf, topLevelNames, type CommandEntry } from './catalogue.js';

/**
 * The version in Countersign's package.json, found by walking up from this module: the same
 * answer from bin/help.ts (tests, tsx) and dist/bin/help.js (the installed command).
 */
export function countersignVersion(from: string = dirname(fileURLToPath(import.meta.url))): string {
  for (let dir = from; ; dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: unknown; version?: unknown };
      if (pkg.name === 'countersign' && typeof pkg.version === 'string') return pkg.version;
    }
    if (dirname(dir) === dir) return 'unknown';
  }
}

const pad = (text: string, width: number) => (text.length >= width ? `${text}  ` : text.padEnd(width));

function table(rows: ReadonlyArray<readonly [string, string]>, indent = '  '): string[] {
  const width = Math.min(30, Math.max(...rows.map(([left]) => left.length)) + 2);
  return rows.map(([left, right]) => (left.length + 2 > width ? `${indent}${left}\n${indent}${' '.repeat(width)}${right}` : `${indent}${pad(left, width)}${right}`));
}

/** `countersign --help`: every command with its summary, the exit codes, the environment. */
export function topLevelHelp(version = countersignVersion()): string {
  return [
    `countersign ${version}: authorization for consequential actions (evaluate, permit, verify at the gate, prove)`,
    '',
    'usage: countersign <command> [options]',
    '',
    'commands:',
    ...table([
      ...COMMANDS.map((entry): [string, string] => [entry.name, entry.summary]),
      ['help [COMMAND]', 'this help, or the help of one command (same as countersign COMMAND --help)'],
      ['version', 'print the version (also --version, -v)'],
    ]),
    '',
    "Run 'countersign <command> --help' for its options and an example.",
    '',
    'exit codes:',
    ...table(EXIT_CODES.map(([code, meaning]) => [String(code), meaning])),
    '',
    'environment:',
    ...table(ENVIRONMENT),
    '',
    'Administration commands (migrate, orgs, keys, policy replay) work on DATABASE_URL at any time, or on the',
    'embedded data directory while no server runs on it.',
  ].join('\n');
}

/** The synopsis lines, each prefixed `usage: countersign`. */
export function usageLines(entry: CommandEntry): string[] {
  return entry.usage.map((line, index) => `${index === 0 ? 'usage:' : '      '} countersign ${line}`);
}

/** `countersign <command> --help`. */
export function commandHelp(entry: CommandEntry): string {
  const lines = [`countersign ${entry.name}: ${entry.summary}`, '', ...usageLines(entry)];
  if (entry.options.length > 0) lines.push('', 'options:', ...table(entry.options.map((option) => [option.flag, option.text])));
  lines.push('', entry.examples.length > 1 ? 'examples:' : 'example:');
  for (const example of entry.examples) {
    if (example.comment) lines.push(`  # ${example.comment}`);
    lines.push(`  ${example.command}`);
  }
  if (entry.notes?.length) lines.push('', 'notes:', ...entry.notes.map((note) => `  ${note}`));
  lines.push('', 'exit codes: 0 success, 1 failed, 2 usage error, 3 data directory in use (countersign --help says more)');
  return lines.join('\n');
}

/** `countersign keys --help`: the subcommands of a group, each with its usage and first example. */
export function groupHelp(group: string): string {
  const subs = subcommandsOf(group);
  const lines = [`countersign ${group}: ${subs.map((entry) => entry.name.slice(group.length + 1)).join(', ')}`, '', `usage: countersign ${group} <subcommand> [options]`, ''];
  for (const entry of subs) {
    lines.push(`  ${entry.name}: ${entry.summary}`, `    countersign ${entry.usage[0] ?? entry.name}`, `    e.g. ${entry.examples[0]?.command ?? ''}`, '');
  }
  lines.push(`Run 'countersign ${group} <subcommand> --help' for its options and more examples.`);
  return lines.join('\n');
}

/** The short usage shown under a usage error: that command's synopsis and where to read more. */
export function usageFor(name: string): string {
  const entry = COMMANDS.find((candidate) => candidate.name === name);
  if (entry) return [...usageLines(entry), `run 'countersign ${name} --help' for the options and an example`].join('\n');
  const subs = subcommandsOf(name);
  if (subs.length > 0) {
    return [...subs.map((sub, index) => `${index === 0 ? 'usage:' : '      '} countersign ${sub.usage[0] ?? sub.name}`), `run 'countersign ${name} --help' for the subcommands and examples`].join('\n');
  }
  return `usage: countersign <command> [options]\nrun 'countersign --help' for the commands`;
}

/** Edit distance counting a swap of two neighbouring letters as one edit (kyes → keys). */
function distance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  const at = (i: number, j: number) => d[i]?.[j] ?? 0;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      let cost = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) cost = Math.min(cost, at(i - 2, j - 2) + 1);
      (d[i] as number[])[j] = cost;
    }
  }
  return at(a.length, b.length);
}

/** The candidate closest to `word`, if it is close enough to be a typo (or `word` is its prefix). */
export function suggest(word: string, candidates: readonly string[]): string | undefined {
  const prefixed = candidates.filter((candidate) => word.length >= 2 && candidate.startsWith(word));
  if (prefixed.length === 1) return prefixed[0];
  let best: { candidate: string; cost: number } | undefined;
  for (const candidate of candidates) {
    const cost = distance(word, candidate);
    if (!best || cost < best.cost) best = { candidate, cost };
  }
  return best && best.cost <= Math.max(1, Math.floor(word.length / 3)) ? best.candidate : undefined;
}

/** The options a command accepts, as `--name` (for "did you mean" on an unknown option). */
export function optionNames(name: string): string[] {
  const entry = COMMANDS.find((candidate) => candidate.name === name);
  return (entry?.options ?? []).map((option) => option.flag.split(' ')[0] as string).filter((flag) => flag.startsWith('--'));
}

export { topLevelNames };

const code = (text: string) => `\`${text.replace(/`/g, '\\`')}\``;
const cell = (text: string) => text.replace(/\|/g, '\\|');

/** docs/cli.md, rendered from the catalogue (test/docs/cli-reference.test.ts keeps it current). */
export function renderCliReference(): string {
  const lines = [
    '# The countersign command',
    '',
    '<!-- Generated from bin/catalogue.ts: edit the catalogue, then run',
    '     UPDATE_CLI_DOC=1 npx tap --disable-coverage test/docs/cli-reference.test.ts -->',
    '',
    '`countersign <command> --help` prints the same help as this page for one command;',
    '`countersign --version` prints the version. Installed globally (`npm install -g countersign`,',
    'or a release tarball: see the README), it is `countersign`; installed in a project, or in a',
    'clone after `npm ci && npm run build`, run it there as `npx countersign`.',
    '',
    '| Command | What it does |',
    '| - | - |',
    ...COMMANDS.map((entry) => `| [${code(entry.name)}](#countersign-${entry.name.replace(/ /g, '-')}) | ${cell(entry.summary)} |`),
    '',
    '## Exit codes',
    '',
    '| Code | Meaning |',
    '| - | - |',
    ...EXIT_CODES.map(([exit, meaning]) => `| ${exit} | ${cell(meaning)} |`),
    '',
    'A usage error prints `countersign: <what is wrong>`, then the usage of that command only and the',
    'command to run for its help. Other failures print `countersign: <what happened>` and what to do.',
    '',
    '## Environment',
    '',
    '| Variable | Meaning |',
    '| - | - |',
    ...ENVIRONMENT.map(([name, meaning]) => `| ${code(name)} | ${cell(meaning)} |`),
    '',
    '## Administration while the embedded server runs',
    '',
    'The embedded database (PGlite, in `<data dir>/pglite`) can be opened by one process at a time.',
    'While `countersign start` or `countersign authority` runs on it, `migrate`, `orgs` and `keys`',
    'are run by that server: the command sends itself to the server\'s admin listener, on this machine',
    'only, with the token the server keeps in `<data dir>/admin-channel.json` (mode 0600, so it takes',
    'the access that opening the database would). The output is the same; stderr says the server',
    'ran it.',
    '',
    '`policy replay`, and any command when the server cannot take it (it is stopping, or it is a',
    'version without this channel), change nothing, exit 3 and say what to do instead: stop the',
    'server first, or make the change through the running server\'s API (the message gives the',
    '`curl` command for the API-key commands), or run Countersign on Postgres (`DATABASE_URL`), where',
    'every command opens the database itself while servers run.',
  ];
  for (const entry of COMMANDS) {
    lines.push('', `## countersign ${entry.name}`, '', `${entry.summary[0]?.toUpperCase()}${entry.summary.slice(1)}.`, '', '```', ...entry.usage.map((line) => `countersign ${line}`), '```');
    if (entry.options.length > 0) {
      lines.push('', '| Option | Meaning |', '| - | - |', ...entry.options.map((option) => `| ${cell(code(option.flag))} | ${cell(option.text)} |`));
    }
    lines.push('', entry.examples.length > 1 ? 'Examples:' : 'Example:', '', '```sh');
    for (const example of entry.examples) {
      if (example.comment) lines.push(`# ${example.comment}`);
      lines.push(example.command);
    }
    lines.push('```');
    if (entry.notes?.length) lines.push('', ...entry.notes.flatMap((note) => [note, '']).slice(0, -1));
  }
  return `${lines.join('\n')}\n`;
}
