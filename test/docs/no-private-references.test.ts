/**
 * The repository speaks to its users, and they have only the repository: no file may send them
 * to design notes, an interface contract or issue numbers they cannot read. Code, comments, docs,
 * configuration and tests say what the product does and why, or point to docs/architecture.md.
 * Every text file is read, apart from dependencies, build output and vendored protocol files.
 *
 * @example
 *   npx tap --disable-coverage test/docs/no-private-references.test.ts
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import t from 'tap';
import { REPO_ROOT } from '../helpers/repo.js';

const SKIPPED_FOLDERS = new Set(['node_modules', 'dist', '.git', '.tap', 'coverage', 'protos']);
const TEXT_FILE = /\.(ts|tsx|mjs|js|json|md|ya?ml|sql|tpl|css|html|txt|sh)$|^(Dockerfile|run)$/;

/** What a user cannot follow. Built from parts, so that this file does not name them itself. */
const PRIVATE_REFERENCES: Array<[what: string, pattern: RegExp]> = [
  ['the design notes', new RegExp(['DESIGN', 'md'].join('\\.'))],
  ['the interface contract file', new RegExp(['interface', 'spec'].join('-'))],
  ['the contract called by name', new RegExp(['\\bthe', 'spec\\b'].join(' '), 'i')],
  ['an issue number', new RegExp(['\\bissues?', '#?\\d+\\b'].join(' '), 'i')],
  ['a numbered rule of the contract', new RegExp(['\\bcore', 'rule', '\\d+'].join(' '), 'i')],
];

function textFiles(folder: string, into: string[] = []): string[] {
  for (const entry of readdirSync(folder, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      if (!SKIPPED_FOLDERS.has(entry.name)) textFiles(join(folder, entry.name), into);
    } else if (TEXT_FILE.test(entry.name) && entry.name !== 'package-lock.json') {
      into.push(join(folder, entry.name));
    }
  }
  return into;
}

t.test('no file cites design notes, an interface contract or issue numbers', async (t) => {
  const files = textFiles(REPO_ROOT);
  t.ok(files.length > 300, `read the repository's text files (${files.length})`);
  const found: string[] = [];
  for (const file of files) {
    const lines = readFileSync(file, 'utf8').split('\n');
    lines.forEach((line, index) => {
      for (const [what, pattern] of PRIVATE_REFERENCES) {
        if (pattern.test(line)) found.push(`${relative(REPO_ROOT, file)}:${index + 1}: ${what}: ${line.trim().slice(0, 120)}`);
      }
    });
  }
  t.same(found, [], 'none found');
});

t.test('each pattern finds what it is for', async (t) => {
  const samples = [
    `see ${['DESIGN', 'md'].join('.')}, "Permit"`,
    `the contract in ${['interface', 'spec'].join('-')}.md`,
    `as ${['the', 'spec'].join(' ')} says`,
    `a regression (${['issue', '14'].join(' ')}, point 5)`,
    `${['core', 'rule', '9'].join(' ')} holds`,
  ];
  samples.forEach((sample, index) => t.ok(PRIVATE_REFERENCES[index]![1].test(sample), PRIVATE_REFERENCES[index]![0]));
  t.notOk(PRIVATE_REFERENCES.some(([, pattern]) => pattern.test('the moment of issue is iat_ms; RFC 9110 §7.6.1; the pod spec')), 'ordinary words pass');
});
