/**
 * Loopback plumbing shared by the end-to-end tests: listen on an ephemeral port, close with every
 * connection, a URL where nothing listens, and a shared store that is down.
 *
 * @example
 *   const url = await listen(createServer(handler)); // http://127.0.0.1:<port>
 */
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
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

/**
 * A loopback port where nothing listens: a privileged one that refuses connections. Not a port
 * bound and closed again: test servers bind port 0, and the kernel may hand that same port to the
 * next one that asks, while a test still counts on it to refuse (a "dead" upstream once answered
 * 400). Ports below 1024 are outside the range the kernel picks from.
 */
export async function deadPort(): Promise<number> {
  for (const port of DEAD_PORT_CANDIDATES) {
    if (await refuses(port)) return port;
  }
  throw new Error(`something listens on every one of 127.0.0.1:${DEAD_PORT_CANDIDATES.join(', ')}`);
}

/** A loopback URL where nothing listens (deadPort). */
export async function deadUrl(): Promise<string> {
  return `http://127.0.0.1:${await deadPort()}`;
}

/** tcpmux, discard, daytime, time: long unused, and never handed out for port 0. */
const DEAD_PORT_CANDIDATES = [1, 9, 13, 37];

function refuses(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code === 'ECONNREFUSED'));
  });
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
