/**
 * The check behind every generated documentation page (docs/api.md, docs/cli.md, docs/metrics.md):
 * the committed file must equal what its generator renders now. With the page's UPDATE_… variable
 * set to 1, the test writes the file instead of comparing it.
 *
 * @example
 *   checkGeneratedPage(t, { file: 'docs/cli.md', rendered: renderCliReference(), updateVariable: 'UPDATE_CLI_DOC',
 *     regenerate: 'npm run docs:cli', source: 'bin/catalogue.ts' });
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import { REPO_ROOT as root } from '../helpers/repo.js';


export interface GeneratedPage {
  /** Relative to the repository's root. */
  file: string;
  rendered: string;
  updateVariable: string;
  /** The command that regenerates the page. */
  regenerate: string;
  /** What the page is rendered from, for the failure message. */
  source: string;
}

export function checkGeneratedPage(t: Test, page: GeneratedPage): void {
  const path = join(root, page.file);
  if (process.env[page.updateVariable] === '1') {
    writeFileSync(path, page.rendered);
    t.comment(`wrote ${path}`);
  }
  let committed = '';
  try {
    committed = readFileSync(path, 'utf8');
  } catch {
    t.fail(`${page.file} is missing; generate it with \`${page.regenerate}\``);
    return;
  }
  t.ok(committed === page.rendered, `${page.file} is out of date with ${page.source}; regenerate it with \`${page.regenerate}\``);
  if (committed !== page.rendered) t.equal(committed, page.rendered, 'the difference');
}
