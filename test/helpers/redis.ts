/**
 * Redis for tests: the URL of the test Redis (from REDIS_URL) and a random key prefix per use,
 * so test files running in parallel against one Redis never see each other's keys.
 *
 * @example
 *   const url = redisUrl();
 *   if (!url) t.comment(`Redis variant not run: ${REDIS_NOT_RUN_REASON}`);
 *   else {
 *     const prefix = uniquePrefix();
 *     const store = new RedisStore({ url, keyPrefix: prefix });
 *     t.teardown(() => deleteKeys(url, prefix));
 *   }
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';

/** Why Redis-backed tests did not run; printed with a comment instead of a silent skip. */
export const REDIS_NOT_RUN_REASON =
  'REDIS_URL is not set: start redis-server or run `npm test`, which starts one';

/** The test Redis, or undefined when REDIS_URL is unset or empty. */
export function redisUrl(): string | undefined {
  const url = process.env['REDIS_URL']?.trim();
  return url ? url : undefined;
}

/** A key prefix no other test uses: `test:<uuid>:`. */
export function uniquePrefix(): string {
  return `test:${randomUUID()}:`;
}

/** Removes every key under `prefix`, so a developer's Redis does not fill up with test streams. */
export async function deleteKeys(url: string, prefix: string): Promise<void> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  client.on('error', () => {});
  try {
    await client.connect();
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await client.unlink(...keys);
    } while (cursor !== '0');
  } finally {
    client.disconnect();
  }
}
