/**
 * Keeps the documentation's cross-references honest: every relative link in README.md,
 * CHANGELOG.md, CONTRIBUTING.md, SECURITY.md, docs/ and test/bench/README.md must name a file or
 * folder that exists in the repository, and a `#fragment` pointing into a Markdown file must name
 * one of its headings (as GitHub renders them: lower case, punctuation dropped, spaces to hyphens,
 * repeats numbered).
 * Links inside code blocks and inline code are examples, not links, and are skipped; so are
 * absolute URLs (http:, https:, mailto:).
 *
 * @example
 *   npx tap --disable-coverage test/docs/links.test.ts
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import t from 'tap';
import { REPO_ROOT as root } from '../helpers/repo.js';


function markdownUnder(folder: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(folder, { withFileTypes: true })) {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) found.push(...markdownUnder(path));
    else if (entry.name.endsWith('.md')) found.push(path);
  }
  return found;
}

const documents = [
  join(root, 'README.md'),
  join(root, 'CHANGELOG.md'),
  join(root, 'CONTRIBUTING.md'),
  join(root, 'SECURITY.md'),
  join(root, 'test', 'bench', 'README.md'),
  ...markdownUnder(join(root, 'docs')),
].filter((path) => existsSync(path));

/** The Markdown with fenced code blocks blanked out, line for line, so line numbers still match. */
function withoutFences(markdown: string): string[] {
  let fence: string | null = null;
  return markdown.split('\n').map((line) => {
    const opener = /^\s*(```+|~~~+)/.exec(line);
    if (fence === null && opener) {
      fence = opener[1]![0]!.repeat(3);
      return '';
    }
    if (fence !== null) {
      if (line.trimStart().startsWith(fence)) fence = null;
      return '';
    }
    return line;
  });
}

/** GitHub's heading anchor for a heading's Markdown text. */
function headingSlug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/<[^>]+>/g, '') // inline HTML tags
    .replace(/`/g, '')
    .replace(/\*\*|__/g, '')
    .replace(/(^|\s)[*_]|[*_](\s|$)/g, '$1$2'); // emphasis markers at word edges
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

const anchorCache = new Map<string, Set<string>>();

/** Every anchor a Markdown file offers: its headings' slugs (repeats numbered) and explicit ids. */
function anchorsOf(file: string): Set<string> {
  const cached = anchorCache.get(file);
  if (cached) return cached;
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of withoutFences(readFileSync(file, 'utf8'))) {
    const heading = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      const base = headingSlug(heading[1]!);
      const count = seen.get(base) ?? 0;
      seen.set(base, count + 1);
      anchors.add(count === 0 ? base : `${base}-${count}`);
    }
    for (const explicit of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(explicit[1]!);
  }
  anchorCache.set(file, anchors);
  return anchors;
}

interface Link {
  line: number;
  target: string;
}

function linksOf(file: string): Link[] {
  const links: Link[] = [];
  withoutFences(readFileSync(file, 'utf8')).forEach((raw, index) => {
    const line = raw.replace(/`[^`]*`/g, ''); // inline code is an example, not a link
    for (const match of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      links.push({ line: index + 1, target: match[1]! });
    }
  });
  return links;
}

/** Why a link does not resolve, or null when it does. */
function problemWith(file: string, target: string): string | null {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return null; // http:, https:, mailto:
  const hashAt = target.indexOf('#');
  const pathPart = hashAt === -1 ? target : target.slice(0, hashAt);
  const fragment = hashAt === -1 ? null : decodeURIComponent(target.slice(hashAt + 1));
  const resolved = pathPart === '' ? file : resolve(dirname(file), decodeURIComponent(pathPart));
  const fromRoot = relative(root, resolved);
  if (fromRoot.startsWith('..')) return `points outside the repository (${fromRoot})`;
  if (!existsSync(resolved)) return `no such file: ${fromRoot}`;
  if (fragment === null || fragment === '') return null;
  if (!resolved.endsWith('.md') || statSync(resolved).isDirectory()) return null;
  if (!anchorsOf(resolved).has(fragment)) return `no heading "#${fragment}" in ${fromRoot}`;
  return null;
}

t.test('headingSlug follows GitHub: lower case, punctuation dropped, spaces to hyphens', async (t) => {
  t.equal(headingSlug('Alerts (prometheusRule.enabled)'), 'alerts-prometheusruleenabled');
  t.equal(headingSlug('Comparing builds: `proxy-compare.mjs`'), 'comparing-builds-proxy-comparemjs');
  t.equal(headingSlug('Shadow → enforce: rolling out a gate'), 'shadow--enforce-rolling-out-a-gate');
  t.equal(headingSlug('The replay store (Redis)'), 'the-replay-store-redis');
});

t.test('the documents checked include the README and every page under docs/', async (t) => {
  const names = documents.map((path) => relative(root, path));
  t.ok(names.includes('README.md'), 'README.md is checked');
  t.ok(names.some((name) => name.startsWith('docs/')), 'docs/*.md are checked');
});

for (const file of documents) {
  const name = relative(root, file);
  t.test(`every relative link in ${name} resolves`, async (t) => {
    const broken = linksOf(file)
      .map((link) => ({ ...link, problem: problemWith(file, link.target) }))
      .filter((link) => link.problem !== null)
      .map((link) => `${name}:${link.line} (${link.target}): ${link.problem}`);
    t.same(broken, [], broken.length === 0 ? `${name}: every link resolves` : `${name}: broken links`);
  });
}
