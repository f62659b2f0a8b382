/**
 * `countersign start` (what `npm start` runs): the authority, a demo upstream and the proxy in
 * front of it, in one process on their embedded defaults, so the whole flow (evaluate → request
 * through the proxy → upstream → audit) works on a fresh machine with nothing else installed.
 *
 * The proxy shares the authority's in-process store (single use and revocation need one store;
 * separate processes need Redis). On first start the proxy gets an API key of its own (scope
 * verify:execute), written to `<data dir>/proxy.key`, mode 0600.
 *
 * @example
 *   countersign start --config config/authority.yaml --proxy-config config/proxy.yaml
 */
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createApiKey } from '../authority/api-keys/keys.js';
import { loadAuthorityConfig } from '../authority/config.js';
import { startAuthority } from '../authority/main.js';
import { findOrganization } from '../authority/orgs/organizations.js';
import type { Db } from '../authority/store/db.js';
import { systemClock } from '../authority/time.js';
import { loadProxyConfig } from '../proxy/config.js';
import { startProxy } from '../proxy/main.js';
import { createLogger } from '../shared/logging.js';
import { startDemoUpstream } from './demo-upstream.js';

/** The proxy's key, made once for organization `default` (or the one named). */
async function provisionProxyKey(db: Db, file: string, organization: string): Promise<string> {
  const org = await findOrganization(db, organization);
  if (!org) throw new Error(`organization "${organization}" does not exist`);
  if (existsSync(file)) return org.id;
  const { secret } = await createApiKey(db, { org, name: 'proxy (countersign start)', scopes: ['verify:execute'], createdBy: 'start' }, systemClock);
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  await writeFile(file, `${secret}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
  return org.id;
}

export async function runStart(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      config: { type: 'string' },
      'proxy-config': { type: 'string', default: 'config/proxy.yaml' },
      organization: { type: 'string', default: 'default' },
      'upstream-listen': { type: 'string', default: '127.0.0.1:7090' },
    },
  });
  const config = await loadAuthorityConfig({ file: values.config });
  const logger = createLogger({ name: 'countersign', level: config.log_level });
  const proxyFile = values['proxy-config'] as string;
  // Checked before anything starts, so a bad proxy.yaml stops the command with its field paths.
  await loadProxyConfig(proxyFile);

  const authority = await startAuthority(config, { logger: logger.child({ name: 'authority' }) });
  const [upstreamHost = '127.0.0.1', upstreamPort = '7090'] = (values['upstream-listen'] as string).split(/:(?=\d+$)/);
  const upstream = await startDemoUpstream({ host: upstreamHost, port: Number(upstreamPort) });
  try {
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
      { authority: authority.apiUrl, proxy: proxy.url, upstream: upstream.url, admin: [authority.adminUrl, proxy.adminUrl] },
      `ready: the authority at ${authority.apiUrl}, the proxy at ${proxy.url} in front of the demo upstream at ${upstream.url}`,
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
        .then(
          () => process.exit(0),
          () => process.exit(1),
        );
    };
    process.once('SIGTERM', () => shutdown('SIGTERM'));
    process.once('SIGINT', () => shutdown('SIGINT'));
    process.on('SIGHUP', () => void proxy.reload());
  } catch (error) {
    await upstream.close();
    await authority.close();
    throw error;
  }
}
