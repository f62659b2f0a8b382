/**
 * The data directory's key files, one per database: the admin key of the bootstrap
 * (`bootstrap.json`) and the key `countersign start` gives its proxy (`proxy.key`). A data
 * directory outlives the database it first served (DATABASE_URL set, or unset, later), and a key
 * works only against the database that issued it; so an existing file is never overwritten. A
 * key for another database goes beside it, in `<name>-<time>.<ext>`, and each database finds its
 * own among them again.
 *
 * @example
 *   const { file, kept } = await writeKeyFile('.countersign', PROXY_KEY_FILE, 'ask_live_…\n', clock);
 *   // file: '.countersign/proxy.key', or '.countersign/proxy-20261125T101500Z.key' (kept: '.countersign/proxy.key')
 *   await keyFilesOf('.countersign', PROXY_KEY_FILE); // ['/…/proxy.key', '/…/proxy-20261125T101500Z.key']
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Clock } from '../time.js';

/** A kind of key file: `bootstrap` + `.json` is bootstrap.json, and bootstrap-<time>.json beside it. */
export interface KeyFileName {
  base: string;
  ext: string;
}

export const BOOTSTRAP_FILE: KeyFileName = { base: 'bootstrap', ext: '.json' };
export const PROXY_KEY_FILE: KeyFileName = { base: 'proxy', ext: '.key' };
/** The key an MCP route's inline decisions evaluate with, under `countersign start`. */
export const MCP_GATE_KEY_FILE: KeyFileName = { base: 'mcp-gate', ext: '.key' };

/** Writes `body` to `file` (mode 0600) unless it exists; false when it does. */
async function writeNew(file: string, body: string): Promise<boolean> {
  try {
    await writeFile(file, body, { mode: 0o600, flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
  await chmod(file, 0o600);
  return true;
}

/** Writes a key file: `<base><ext>` when free, else a new `<base>-<time><ext>` beside it (`kept` names the first). */
export async function writeKeyFile(dataDir: string, name: KeyFileName, body: string, clock: Clock): Promise<{ file: string; kept: string | null }> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const primary = resolve(join(dataDir, `${name.base}${name.ext}`));
  if (await writeNew(primary, body)) return { file: primary, kept: null };
  const stamp = new Date(clock.now()).toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
  for (const suffix of ['', ...Array.from({ length: 3 }, () => `-${randomBytes(3).toString('hex')}`)]) {
    const file = resolve(join(dataDir, `${name.base}-${stamp}${suffix}${name.ext}`));
    if (await writeNew(file, body)) return { file, kept: primary };
  }
  throw new Error(`cannot find a free file name for a key in ${dataDir}`);
}

/** The key files of one kind in `dataDir`: `<base><ext>` first, then the others, oldest first. */
export async function keyFilesOf(dataDir: string, name: KeyFileName): Promise<string[]> {
  let entries: string[];
  try {
    entries = await readdir(dataDir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  const primary = `${name.base}${name.ext}`;
  const stamped = new RegExp(`^${name.base}-\\d{8}T\\d{6}Z(-[0-9a-f]{6})?${name.ext.replace('.', '\\.')}$`);
  const others = entries.filter((entry) => stamped.test(entry)).sort();
  return [...(entries.includes(primary) ? [primary] : []), ...others].map((entry) => resolve(join(dataDir, entry)));
}
