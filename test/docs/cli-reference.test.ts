/**
 * Keeps docs/cli.md in step with the command catalogue (bin/catalogue.ts): the page must equal
 * the reference rendered from it, so every command's usage, options and examples there are the
 * ones `countersign <command> --help` prints.
 *
 * With UPDATE_CLI_DOC=1 the test writes docs/cli.md instead of comparing it:
 *   npm run docs:cli
 */
import t from 'tap';
import { COMMANDS, EXIT_CODES } from '../../bin/catalogue.js';
import { renderCliReference } from '../../bin/help.js';
import { checkGeneratedPage } from './generated-page.js';


t.test('docs/cli.md is the reference rendered from the command catalogue', async (t) => {
  const rendered = renderCliReference();
  checkGeneratedPage(t, { file: 'docs/cli.md', rendered, updateVariable: 'UPDATE_CLI_DOC', regenerate: 'npm run docs:cli', source: 'bin/catalogue.ts' });
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
