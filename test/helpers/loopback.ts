/**
 * Loopback plumbing shared by the end-to-end tests: listen on an ephemeral port, close with every
 * connection, a URL where nothing listens, and a shared store that is down.
 *
 * @example
 *   const url = await listen(createServer(handler)); // http://127.0.0.1:<port>
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { SharedStore } from '../../shared/store/types.js';

export async function listen(server: Server, port = 0): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** A loopback URL where nothing listens: a server bound and closed again. */
export async function deadUrl(): Promise<string> {
  const server = createServer();
  const url = await listen(server);
  await closeServer(server);
  return url;
}

/** A store that is down: every call rejects. */
export function downStore(): SharedStore {
  const down = () => Promise.reject(new Error('ECONNREFUSED'));
  return {
    kind: 'redis',
    consumePermit: down,
    ensureEpoch: down,
    checkDurability: down,
    revoke: down,
    isRevoked: down,
    takeToken: down,
    appendRecord: down,
    appendRecords: down,
    readRecords: down,
    countRecords: down,
    trimRecords: down,
    ping: down,
    close: () => Promise.resolve(),
  };
}
