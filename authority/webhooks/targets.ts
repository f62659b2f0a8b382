/**
 * Where deliveries may go. Targets that resolve to private, loopback, link-local or otherwise
 * non-public addresses are refused unless `webhooks.allow_private_targets` is set, so a webhook
 * URL cannot be used to reach the authority's own network (SSRF). The check happens where the
 * connection is made: the delivery agent's DNS lookup drops such addresses, so a name that
 * resolved to a public address when the subscription was created and to 10.0.0.5 now is refused
 * now. URLs naming such an address literally are refused up front as well (no lookup happens
 * for an IP literal).
 *
 * @example
 *   const agent = deliveryAgent({ allowPrivate: false }); // its lookups drop private addresses
 *   isForbiddenAddress('169.254.169.254'); // true
 *   literalTargetProblem('http://127.0.0.1:8080/hook', false); // 'the url names a private, loopback or link-local address'
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { Agent } from 'undici';

const forbidden = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['198.51.100.0', 24], ['203.0.113.0', 24],
  ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) {
  forbidden.addSubnet(network, prefix, 'ipv4');
}
for (const [network, prefix] of [
  ['::', 128], ['::1', 128], ['fc00::', 7], ['fe80::', 10], ['ff00::', 8], ['2001:db8::', 32], ['100::', 64],
] as const) {
  forbidden.addSubnet(network, prefix, 'ipv6');
}

/** An IPv4 address carried inside IPv6 (mapped ::ffff:a.b.c.d, or NAT64 64:ff9b::/96), else null. */
function embeddedIpv4(address: string): string | null {
  const match = /^(?:::ffff:|64:ff9b::)(?:(\d+\.\d+\.\d+\.\d+)|([0-9a-f]{1,4}):([0-9a-f]{1,4}))$/i.exec(address);
  if (!match) return null;
  if (match[1]) return match[1];
  const high = parseInt(match[2] as string, 16);
  const low = parseInt(match[3] as string, 16);
  return [high >> 8, high & 255, low >> 8, low & 255].join('.');
}

/** True for an address a delivery must not reach unless private targets are allowed. */
export function isForbiddenAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, '');
  const version = isIP(bare);
  if (version === 4) return forbidden.check(bare, 'ipv4');
  if (version === 6) {
    const inner = embeddedIpv4(bare);
    return inner !== null ? forbidden.check(inner, 'ipv4') : forbidden.check(bare, 'ipv6');
  }
  return true; // not an address at all: nothing we can vouch for
}

/**
 * Why a URL is refused before any connection: it names a forbidden address literally, or
 * `localhost`. Names are otherwise checked when they are resolved, at connect time. null: fine.
 */
export function literalTargetProblem(url: string, allowPrivate: boolean): string | null {
  if (allowPrivate) return null;
  const host = new URL(url).hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost')) return 'the url names localhost; private, loopback and link-local targets are not allowed';
  if (isIP(host) !== 0 && isForbiddenAddress(host)) return 'the url names a private, loopback or link-local address, which is not allowed';
  return null;
}

export class ForbiddenTargetError extends Error {
  readonly code = 'WEBHOOK_TARGET_FORBIDDEN';
}

/** The resolver a lookup asks: dns.lookup in production; tests give a fixed table. */
export type Resolver = (hostname: string, options: { all: true; family?: number }, callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void;

const systemResolver: Resolver = (hostname, options, callback) => dnsLookup(hostname, options, callback);

/** A net.connect lookup that asks `resolve` and, unless private targets are allowed, drops forbidden addresses. */
export function filteringLookup(options: { allowPrivate: boolean; resolve?: Resolver }): LookupFunction {
  const resolve = options.resolve ?? systemResolver;
  return (hostname, lookupOptions, callback) => {
    const family = typeof lookupOptions.family === 'number' && lookupOptions.family !== 0 ? { family: lookupOptions.family } : {};
    resolve(hostname, { all: true, ...family }, (error, addresses) => {
      if (error) return callback(error, '', 4);
      const allowed = options.allowPrivate ? addresses : addresses.filter((entry) => !isForbiddenAddress(entry.address));
      if (allowed.length === 0) {
        const refused = new ForbiddenTargetError(`${hostname} resolves only to private, loopback or link-local addresses, which are not allowed`);
        return callback(refused, '', 4);
      }
      if (lookupOptions.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, allowed);
      const first = allowed[0] as LookupAddress;
      return callback(null, first.address, first.family);
    });
  };
}

/**
 * The HTTP agent deliveries go through. Without private targets, every connection's lookup goes
 * through the filter above. Redirects are never followed (undici's request does not follow them;
 * a 3xx is a failed attempt).
 */
export function deliveryAgent(options: { allowPrivate: boolean; resolve?: Resolver }): Agent {
  return new Agent({
    connect: { lookup: filteringLookup(options) },
    // A receiver cannot hold a worker's socket open past the delivery.
    keepAliveTimeout: 1_000,
    connections: 16,
  });
}
