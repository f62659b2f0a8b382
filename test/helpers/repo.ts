/**
 * Paths in the repository, for tests that read its files (the example policy, fixtures, docs).
 * The tests run compiled, from dist/test/, so a path relative to the test file's own location
 * would point into dist/; this one is relative to the folder holding package.json, the same from
 * test/ and from dist/test/.
 *
 * @example
 *   readFileSync(repoPath('config', 'policies', 'default.yaml'), 'utf8');
 */
import { join } from 'node:path';
import { packageRoot } from '../../authority/store/migrate.js';

/** The repository's root: the folder holding package.json. */
export const REPO_ROOT = packageRoot();

/** `parts` joined onto the repository's root. */
export function repoPath(...parts: string[]): string {
  return join(REPO_ROOT, ...parts);
}
