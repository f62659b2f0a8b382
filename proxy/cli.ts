/**
 * `countersign proxy [--config FILE]`: runs the sidecar until SIGTERM or SIGINT (then drains and
 * exits 0). SIGHUP and a change to the file reload the configuration. A bad configuration at
 * start rejects with `ProxyConfigError` naming every bad field; the caller prints it and exits 2.
 *
 * @example
 *   await runProxyCommand(['--config', 'config/proxy.yaml']); // returns once listening
 */
import { parseArgs } from 'node:util';
import { startProxy } from './main.js';

export const DEFAULT_PROXY_CONFIG = 'config/proxy.yaml';

export async function runProxyCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { config: { type: 'string' } } });
  const file = values.config ?? DEFAULT_PROXY_CONFIG;
  // startProxy's own logger, so that its level follows log_level on reload.
  const running = await startProxy(file, { handleSighup: true });
  const { logger } = running;
  logger.info({ proxy: running.url, admin: running.adminUrl, config: file }, 'proxy ready');

  let closing = false;
  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    logger.info({ signal }, 'shutting down: draining in-flight requests');
    running.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}
