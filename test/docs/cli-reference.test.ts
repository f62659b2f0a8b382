/**
 * Keeps docs/cli.md in step with the command catalogue (bin/catalogue.ts): the page must equal
 * the reference rendered from it, so every command's usage, options and examples there are the
 * ones `countersign <command> --help` prints.
 *
 * With UPDATE_CLI_DOC=1 the test writes docs/cli.md instead of comparing it:
 *   UPDATE_CLI_DOC=1 npx tap --disable-coverage test/docs/cli-reference.test.ts
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { COMMANDS, EXIT_CODES } from '../../bin/catalogue.js';
import { renderCliReference } from '../../bin/help.js';

const docPath = join(resolve(dirname(fileURLToPath(import.meta.url)), '..', '..'), 'docs', 'cli.md');
const REGENERATE = 'UPDATE_CLI_DOC=1 npx tap --disable-coverage test/docs/cli-reference.test.ts';

t.test('docs/cli.md is the reference rendered from the command catalogue', async (t) => {
  const rendered = renderCliReference();
  if (process.env.UPDATE_CLI_DOC === '1') {
    writeFileSync(docPath, rendered);
    t.comment(`wrote ${docPath}`);
  }
  let committed = '';
  try {
    committed = readFileSync(docPath, 'utf8');
  } catch {
    t.fail(`docs/cli.md is missing; generate it with \`${REGENERATE}\``);
    return;
  }
  t.ok(committed === rendered, `docs/cli.md is out of date with bin/catalogue.ts; regenerate it with \`${REGENERATE}\``);
  if (committed !== rendered) t.equal(committed, rendered, 'the difference');
});

t.test('the reference has a section with usage and an example for every command, and the exit codes', async (t) => {
  const doc = renderCliReference();
  for (const entry of COMMANDS) {
    t.match(doc, `\n## countersign ${entry.name}\n`, `${entry.name} has a section`);
    t.match(doc, `\ncountersign ${entry.usage[0]}\n`, `${entry.name}: its usage`);
    t.ok(entry.examples.length > 0, `${entry.name} has an example`);
    for (const example of entry.examples) t.match(doc, `\n${example.command}\n`);
  }
  for (const [code] of EXIT_CODES) t.match(doc, `\n| ${code} | `, `exit code ${code}`);
});
