/**
 * `countersign start` (what `npm start` runs): the authority, a demo upstream and the proxy in
 * front of it, in one process on their embedded defaults, so the whole flow (evaluate → request
 * through the proxy → upstream → audit) works on a fresh machine with nothing else installed.
 * With `--upstream URL` (or COUNTERSIGN_PROXY_UPSTREAM) the proxy fronts the user's own
 * application instead, and no demo upstream starts.
 *
 * The proxy shares the authority's in-process store (single use and revocation need one store;
 * separate processes need Redis). On first start the proxy gets an API key of its own (scope
 * verify:execute), written to `<data dir>/proxy.key`, mode 0600; one per database, as the
 * bootstrap key is: after DATABASE_URL changes, the new database's proxy key goes to
 * `proxy-<time>.key` beside it, and going back finds each one again. A key of this database that
 * was revoked or expired stops the start with what to do, rather than a proxy that never becomes
 * ready. A second key, `<data dir>/mcp-gate.key` (per database likewise), is what the shipped MCP
 * route's inline decisions evaluate with: scope evaluate:write, for the example policy's agents only.
 *
 * Without --config (and COUNTERSIGN_CONFIG) and --proxy-config it runs on the development
 * configuration and the example routes shipped in Countersign's own config/ folder, so that it
 * works from an installed package in an empty folder as it does in a clone.
 *
 * @example
 *   countersign start
 *   countersign start --config my-authority.yaml --proxy-config my-proxy.yaml
 *   countersign start --upstream http://127.0.0.1:3000
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Logger } from 'pino';
import { createApiKey, findApiKeyBySecret } from '../authority/api-keys/keys.js';
import { loadAuthorityConfig } from '../authority/config.js';
import { startAuthority } from '../authority/main.js';
import { describeDatabase } from '../authority/orgs/bootstrap.js';
import { keyFilesOf, MCP_GATE_KEY_FILE, PROXY_KEY_FILE, writeKeyFile, type KeyFileName } from '../authority/orgs/key-files.js';
import { findOrganization } from '../authority/orgs/organizations.js';
import type { Db } from '../authority/store/db.js';
import { packageRoot } from '../authority/store/migrate.js';
import { systemClock } from '../authority/time.js';
import { loadProxyConfig } from '../proxy/config.js';
import { startProxy } from '../proxy/main.js';
import { createLogger } from '../shared/logging.js';
import { startTelemetry } from '../shared/telemetry/index.js';
import { UsageError } from '../shared/usage-error.js';
import type { Scope } from '../shared/wire/scopes.js';
import { startDemoUpstream, type DemoUpstream } from './demo-upstream.js';

/** A configuration shipped in Countersign's config/ folder, wherever the package is installed. */
const shippedConfig = (name: string): string => join(packageRoot(), 'config', name);

/** The proxy's key file for this database holds a key it no longer accepts: the proxy could never get ready. */
export class StaleProxyKeyError extends Error {
  readonly code = 'PROXY_KEY_STALE';
}

/** The key in `file`, when this database issued it; null when another database did. */
async function keyOfThisDatabase(db: Db, file: string) {
  const secret = (await readFile(file, 'utf8')).split('\n')[0]?.trim() ?? '';
  return secret === '' ? null : findApiKeyBySecret(db, secret);
}

/** Why a key of this database will not do for the proxy of `orgId`, or undefined when it will. */
function unusableReason(found: NonNullable<Awaited<ReturnType<typeof keyOfThisDatabase>>>, orgId: string): string | undefined {
  if (found.key.revokedAt) return 'it has been revoked';
  if (found.key.expiresAt && found.key.expiresAt.getTime() <= Date.now()) return 'it has expired';
  if (found.org.id !== orgId) return `it belongs to organization "${found.org.name}", not to the one this proxy serves`;
  return undefined;
}

/** A key `countersign start` makes once per database and keeps in a file of the data directory. */
interface StartKey {
  file: KeyFileName;
  /** What it is, in messages: "the proxy's API key". */
  what: string;
  name: string;
  scopes: Scope[];
  allowedActors?: string[];
}

/** The proxy's own key: it reads permit keys and revocations, and records verifications. */
const PROXY_KEY: StartKey = { file: PROXY_KEY_FILE, what: "the proxy's API key", name: 'proxy (countersign start)', scopes: ['verify:execute'] };

/**
 * The key the shipped MCP route's inline decisions evaluate with: it speaks only for the example
 * policy's agents, so a caller naming any other actor gets no decision (docs/mcp.md).
 */
const MCP_GATE_KEY: StartKey = {
  file: MCP_GATE_KEY_FILE,
  what: "the MCP gate's API key",
  name: 'MCP gate (countersign start)',
  scopes: ['evaluate:write'],
  allowedActors: ['support-agent', 'ops-agent'],
};

/**
 * The key file of `spec` for this database, made once for organization `default` (or the one
 * named). Each database has its own (key-files.ts): `proxy.key` for the first, `proxy-<time>.key`
 * for others, each file's first line the key and the next the database it belongs to. The file
 * whose key this database knows is this database's; a key only another database knows is left
 * where it is, for when that database is used again.
 */
async function provisionKey(db: Db, dataDir: string, organization: string, logger: Logger, spec: StartKey): Promise<{ orgId: string; file: string }> {
  const org = await findOrganization(db, organization);
  if (!org) throw new Error(`organization "${organization}" does not exist`);
  const files = await keyFilesOf(dataDir, spec.file);
  for (const file of files) {
    const found = await keyOfThisDatabase(db, file);
    if (!found) continue;
    const reason = unusableReason(found, org.id);
    if (reason) {
      throw new StaleProxyKeyError(
        `${spec.what} in ${file} does not authenticate here: ${reason}. The proxy would never become ready.\n` +
          `Delete ${file} to have a new key issued on the next start.`,
      );
    }
    return { orgId: org.id, file };
  }
  const database = await describeDatabase(db, dataDir);
  const { secret } = await createApiKey(db, { org, name: spec.name, scopes: spec.scopes, allowedActors: spec.allowedActors, createdBy: 'start' }, systemClock);
  const { file } = await writeKeyFile(dataDir, spec.file, `${secret}\n# ${spec.what} for ${database}\n`, systemClock);
  if (files.length > 0) {
    logger.info({ file, kept: files, database }, `${spec.what} for this database (${database}) is in ${file}; ${files.join(', ')} ${files.length === 1 ? 'holds the key' : 'hold the keys'} of another database, kept for when it is used again`);
  }
  return { orgId: org.id, file };
}

/** The user's upstream from --upstream or COUNTERSIGN_PROXY_UPSTREAM, checked; undefined: the demo upstream. */
function userUpstream(flag: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  const [value, source] = flag !== undefined ? [flag, '--upstream'] : [env.COUNTERSIGN_PROXY_UPSTREAM || undefined, 'COUNTERSIGN_PROXY_UPSTREAM'];
  if (value === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`${source} must be an http or https URL, such as http://127.0.0.1:3000; got "${value}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`${source} must be an http or https URL; got "${value}"`);
  return value;
}

export async function runStart(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      config: { type: 'string' },
      'proxy-config': { type: 'string' },
      organization: { type: 'string', default: 'default' },
      upstream: { type: 'string' },
      'upstream-listen': { type: 'string' },
    },
  });
  if (values.upstream !== undefined && values['upstream-listen'] !== undefined) {
    throw new UsageError('--upstream-listen is where the demo upstream listens; with --upstream no demo upstream starts');
  }
  const external = userUpstream(values.upstream, process.env);
  const config = await loadAuthorityConfig({ file: values.config ?? process.env.COUNTERSIGN_CONFIG ?? shippedConfig('authority.yaml') });
  // One destination for the three components; each child names its own lines (name appears once).
  const root = createLogger({ level: config.log_level });
  const logger = root.child({ name: 'countersign' });
  const proxyFile = values['proxy-config'] ?? shippedConfig('proxy.yaml');
  // Checked before anything starts, so a bad proxy.yaml stops the command with its field paths.
  await loadProxyConfig(proxyFile);

  // One process, one tracing SDK: the authority's and the proxy's spans under one service name
  // (unless OTEL_SERVICE_NAME says otherwise). Each of them takes a share; this one is released last.
  const telemetry = await startTelemetry({ serviceName: 'countersign', logger });
  let authority: Awaited<ReturnType<typeof startAuthority>>;
  try {
    authority = await startAuthority(config, { logger: root.child({ name: 'authority' }) });
  } catch (error) {
    await telemetry.shutdown();
    throw error;
  }
  let demo: DemoUpstream | undefined;
  try {
    if (external === undefined) {
      const [upstreamHost = '127.0.0.1', upstreamPort = '7090'] = (values['upstream-listen'] ?? '127.0.0.1:7090').split(/:(?=\d+$)/);
      demo = await startDemoUpstream({ host: upstreamHost, port: Number(upstreamPort) });
    }
    const upstream = { url: external ?? (demo as DemoUpstream).url, close: async () => demo?.close() };
    // Beside the database it belongs to, whatever proxy.yaml says: a key from another data
    // directory, or another database, would not authenticate here.
    const { orgId, file: keyFile } = await provisionKey(authority.db, config.data_dir, values.organization as string, logger, PROXY_KEY);
    const { file: mcpKeyFile } = await provisionKey(authority.db, config.data_dir, values.organization as string, logger, MCP_GATE_KEY);
    const proxy = await startProxy(proxyFile, {
      logger: root.child({ name: 'proxy' }),
      store: authority.store,
      env: {
        ...process.env,
        COUNTERSIGN_PROXY_ORGANIZATION: orgId,
        COUNTERSIGN_PROXY_AUTHORITY_URL: authority.apiUrl,
        COUNTERSIGN_PROXY_UPSTREAM: upstream.url,
        COUNTERSIGN_PROXY_API_KEY_FILE: keyFile,
        COUNTERSIGN_PROXY_MCP_API_KEY_FILE: mcpKeyFile,
      },
    });
    logger.info(
      { authority: authority.apiUrl, proxy: proxy.url, upstream: upstream.url, demo_upstream: demo !== undefined, admin: [authority.adminUrl, proxy.adminUrl] },
      `ready: the authority at ${authority.apiUrl}, the proxy at ${proxy.url} in front of ${demo ? 'the demo upstream' : 'your upstream'} at ${upstream.url}`,
    );
    let closing = false;
    const shutdown = (signal: string) => {
      if (closing) return;
      closing = true;
      logger.info({ signal }, 'shutting down: draining in-flight requests');
      proxy
        .close()
        .then(() => upstream.close())
        .then(() => authority.close())
        .then(() => telemetry.shutdown())
        .then(
          () => process.exit(0),
          () => process.exit(1),
        );
    };
    process.once('SIGTERM', () => shutdown('SIGTERM'));
    process.once('SIGINT', () => shutdown('SIGINT'));
    process.on('SIGHUP', () => void proxy.reload());
  } catch (error) {
    await demo?.close();
    await authority.close();
    await telemetry.shutdown();
    throw error;
  }
}
