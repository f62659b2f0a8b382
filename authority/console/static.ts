/**
 * The console's built front end (`npm run build` writes it to dist/console), served from memory:
 * the files are read once, so a request can only ever get one of them (no path reaches the disk).
 * Every page gets a Content-Security-Policy that allows this origin's scripts, styles, images and
 * API calls and nothing else: no inline script, no inline style, no framing.
 *
 * @example
 *   const files = loadConsoleFiles();          // null when the console was not built
 *   consoleFile(files, 'assets/index-3f2a.js'); // { body, contentType, immutable: true }
 *   consoleFile(files, 'inbox');               // index.html: the page's own router takes over
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { packageRoot } from '../store/migrate.js';

export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/** Sent with every console answer, pages and console API alike. */
export const CONSOLE_HEADERS: Readonly<Record<string, string>> = {
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
};

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};

export interface ConsoleFile {
  body: Buffer;
  contentType: string;
  /** Vite names the files under assets/ by their content hash: they never change. */
  immutable: boolean;
}

export type ConsoleFiles = ReadonlyMap<string, ConsoleFile>;

/** Where `npm run build` puts the console. */
export function consoleBuildDir(): string {
  return join(packageRoot(), 'dist', 'console');
}

/** Every file of the built console by its path under /console/; null when it was not built. */
export function loadConsoleFiles(dir: string = consoleBuildDir()): ConsoleFiles | null {
  if (!existsSync(join(dir, 'index.html'))) return null;
  const files = new Map<string, ConsoleFile>();
  const walk = (folder: string) => {
    for (const entry of readdirSync(folder, { withFileTypes: true })) {
      const path = join(folder, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile()) {
        const name = relative(dir, path).split(sep).join('/');
        const contentType = CONTENT_TYPES[extname(name)] ?? 'application/octet-stream';
        files.set(name, { body: readFileSync(path), contentType, immutable: name.startsWith('assets/') });
      }
    }
  };
  walk(dir);
  return files;
}

/**
 * The file for a path under /console/. A path without a file extension is one of the console's
 * pages, which index.html renders; a missing file with an extension is a 404 (undefined).
 */
export function consoleFile(files: ConsoleFiles, path: string): ConsoleFile | undefined {
  const found = files.get(path);
  if (found) return found;
  const lastSegment = path.slice(path.lastIndexOf('/') + 1);
  return lastSegment.includes('.') ? undefined : files.get('index.html');
}
