/**
 * `countersign start` (what `npm start` runs): the authority, a demo upstream and the proxy in
 * front of it, in one process on their embedded defaults, so the whole flow (evaluate → request
 * through the proxy → upstream → audit) works on a fresh machine with nothing else installed.
 * With `--upstream URL` (or COUNTERSIGN_PROXY_UPSTREAM) the proxy fronts the user's own
 * application instead, and no demo upstream starts.
 *
 * The proxy shares the authority's in-process store (single use and revocation need one store;
 * separate processes need Redis). On first start the proxy gets an API key of its own (scope
 * verify:execute), written to `<data dir>/proxy.key`, mode 0600. A key there that this database
 * does not accept (DATABASE_URL changed since it was written) stops the start with what to do,
 * rather than a proxy that never becomes ready.
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
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createApiKey, findApiKeyBySecret } from '../authority/api-keys/keys.js';
import { loadAuthorityConfig } from '../authority/config.js';
import { startAuthority } from '../authority/main.js';
import { findOrganization } from '../authority/orgs/organizations.js';
import type { Db } from '../authority/store/db.js';
import { packageRoot } from '../authority/store/migrate.js';
import { systemClock } from '../authority/time.js';
import { loadProxyConfig } from '../proxy/config.js';
import { startProxy } from '../proxy/main.js';
import { createLogger } from '../shared/logging.js';
import { startTelemetry } from '../shared/telemetry/index.js';
import { UsageError } from '../shared/usage-error.js';
import { startDemoUpstream, type DemoUpstream } from './demo-upstream.js';

/** A configuration shipped in Countersign's config/ folder, wherever the package is installed. */
const shippedConfig = (name: string): string => join(packageRoot(), 'config', name);

/** `<data dir>/proxy.key` holds a key this database does not accept: the proxy could never get ready. */
export class StaleProxyKeyError extends Error {
  readonly code = 'PROXY_KEY_STALE';
}

/** Why the key in proxy.key will not do, or undefined when it will. */
async function staleKeyReason(db: Db, file: string, orgId: string): Promise<string | undefined> {
  const secret = (await readFile(file, 'utf8')).split('\n')[0]?.trim() ?? '';
  const found = secret === '' ? null : await findApiKeyBySecret(db, secret);
  if (!found) return 'this database does not know it: it was issued by another database (was DATABASE_URL changed, or set, since the key was written?)';
  if (found.key.revokedAt) return 'it has been revoked';
  if (found.key.expiresAt && found.key.expiresAt.getTime() <= Date.now()) return 'it has expired';
  if (found.org.id !== orgId) return `it belongs to organization "${found.org.name}", not to the one this proxy serves`;
  return undefined;
}

/** The proxy's key, made once for organization `default` (or the one named). */
async function provisionProxyKey(db: Db, file: string, organization: string): Promise<string> {
  const org = await findOrganization(db, organization);
  if (!org) throw new Error(`organization "${organization}" does not exist`);
  if (existsSync(file)) {
    const reason = await staleKeyReason(db, file, org.id);
    if (reason) {
      throw new StaleProxyKeyError(
        `the proxy's API key in ${file} does not authenticate here: ${reason}. The proxy would never become ready.\n` +
          `Delete ${file} to have a new key issued on the next start, or set DATABASE_URL back to the database that issued it.`,
      );
    }
    return org.id;
  }
  const { secret } = await createApiKey(db, { org, name: 'proxy (countersign start)', scopes: ['verify:execute'], createdBy: 'start' }, systemClock);
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  await writeFile(file, `${secret}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
  return org.id;
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
  const logger = createLogger({ name: 'countersign', level: config.log_level });
  const proxyFile = values['proxy-config'] ?? shippedConfig('proxy.yaml');
  // Checked before anything starts, so a bad proxy.yaml stops the command with its field paths.
  await loadProxyConfig(proxyFile);

  // One process, one tracing SDK: the authority's and the proxy's spans under one service name
  // (unless OTEL_SERVICE_NAME says otherwise). Each of them takes a share; this one is released last.
  const telemetry = await startTelemetry({ serviceName: 'countersign', logger });
  let authority: Awaited<ReturnType<typeof startAuthority>>;
  try {
    authority = await startAuthority(config, { logger: logger.child({ name: 'authority' }) });
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
    // directory would not authenticate here.
    const keyFile = resolve(config.data_dir, 'proxy.key');
    const orgId = await provisionProxyKey(authority.db, keyFile, values.organization as string);
    const proxy = await startProxy(proxyFile, {
      logger: logger.child({ name: 'proxy' }),
      store: authority.store,
      env: {
        ...process.env,
        COUNTERSIGN_PROXY_ORGANIZATION: orgId,
        COUNTERSIGN_PROXY_AUTHORITY_URL: authority.apiUrl,
        COUNTERSIGN_PROXY_UPSTREAM: upstream.url,
        COUNTERSIGN_PROXY_API_KEY_FILE: keyFile,
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
