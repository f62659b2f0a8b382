/**
 * Where deliveries may go. Targets are classified with `ipaddr.js`'s range names (a maintained
 * table of the IANA special-purpose registries): only `unicast` is allowed unless
 * `webhooks.allow_private_targets` is set, so a webhook URL cannot be used to reach the
 * authority's own network (SSRF). IPv6 forms that carry an IPv4 address (mapped `::ffff:a.b.c.d`,
 * SIIT `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the IPv4 address
 * they lead to; forms whose destination cannot be read off the address (Teredo, the local-use
 * NAT64 prefix `64:ff9b:1::/48`) are refused, and so is IPv6 "unicast" outside `2000::/3`, the
 * only block IANA hands out as global unicast (that catches the deprecated IPv4-compatible
 * `::a.b.c.d`, which the library reads as unicast).
 *
 * The check happens where the connection is made: the delivery agent's DNS lookup drops such
 * addresses, so a name that resolved to a public address when the subscription was created and
 * to 10.0.0.5 now is refused now. URLs naming such an address literally are refused up front as
 * well (no lookup happens for an IP literal).
 *
 * @example
 *   const agent = deliveryAgent({ allowPrivate: false }); // its lookups drop private addresses
 *   isForbiddenAddress('169.254.169.254'); // true
 *   addressRange('[64:ff9b::7f00:1]'); // 'rfc6052 → loopback'
 *   literalTargetProblem('http://127.0.0.1:8080/hook', false); // 'the url names … (range loopback) …'
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import { Agent } from 'undici';

/** 2000::/3: the only IPv6 block allocated as global unicast. */
const GLOBAL_UNICAST_V6 = ipaddr.parse('2000::') as ipaddr.IPv6;

/** The IPv4 address an IPv6 form carries and leads to, for the forms where it can be read off. */
function embeddedIpv4(address: ipaddr.IPv6, range: string): ipaddr.IPv4 | null {
  const bytes = address.toByteArray();
  switch (range) {
    case 'ipv4Mapped': // ::ffff:a.b.c.d
    case 'rfc6145': // ::ffff:0:a.b.c.d
      return new ipaddr.IPv4(bytes.slice(12, 16));
    case 'rfc6052': // 64:ff9b::a.b.c.d; the local-use 64:ff9b:1::/48 embeds by an operator's choice
      return address.match(ipaddr.parse('64:ff9b::') as ipaddr.IPv6, 96) ? new ipaddr.IPv4(bytes.slice(12, 16)) : null;
    case '6to4': // 2002:aabb:ccdd::/48
      return new ipaddr.IPv4(bytes.slice(2, 6));
    default:
      return null;
  }
}

/**
 * Parses an address as the connection would use it. IPv6 goes through the WHATWG URL serializer
 * first, so that `::127.0.0.1` means what a socket means by it (`::7f00:1`), not what
 * `ipaddr.parse` makes of a dotted tail (it reads it as `::ffff:7f00:1`).
 */
function parseAddress(address: string): ipaddr.IPv4 | ipaddr.IPv6 | null {
  const bare = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const version = isIP(bare);
  try {
    if (version === 4) return ipaddr.IPv4.parse(bare);
    if (version === 6) return ipaddr.IPv6.parse(new URL(`http://[${bare}]/`).hostname.slice(1, -1));
  } catch {
    return null;
  }
  return null;
}

/**
 * The range an address belongs to: `unicast` for an ordinary public address, else the
 * `ipaddr.js` range name (`loopback`, `private`, `uniqueLocal`, `deprecatedSiteLocal`, …), with
 * `→ <range of the IPv4 inside>` for forms that carry one, `unallocated` for IPv6 outside
 * 2000::/3 that the library calls unicast, and `invalid` for anything that is not an address.
 */
export function addressRange(address: string): string {
  const parsed = parseAddress(address);
  if (parsed === null) return 'invalid';
  if (parsed.kind() === 'ipv4') return parsed.range();
  const v6 = parsed as ipaddr.IPv6;
  const range = v6.range();
  if (range === 'unicast') return v6.match(GLOBAL_UNICAST_V6, 3) ? 'unicast' : 'unallocated';
  const inner = embeddedIpv4(v6, range);
  return inner === null ? range : `${range} → ${inner.range()}`;
}

/** Ranges a delivery may reach without `allow_private_targets`: public unicast, directly or through a translator. */
function isAllowedRange(range: string): boolean {
  return range === 'unicast' || / → unicast$/.test(range);
}

/** True for an address a delivery must not reach unless private targets are allowed (fails closed: not an address → true). */
export function isForbiddenAddress(address: string): boolean {
  return !isAllowedRange(addressRange(address));
}

/**
 * Why a URL is refused before any connection: it names a forbidden address literally, or
 * `localhost`. Names are otherwise checked when they are resolved, at connect time. null: fine.
 */
export function literalTargetProblem(url: string, allowPrivate: boolean): string | null {
  if (allowPrivate) return null;
  const host = new URL(url).hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost')) return 'the url names localhost; private, loopback and link-local targets are not allowed';
  if (isIP(host) !== 0 && isForbiddenAddress(host)) {
    return `the url names a private, loopback or link-local address (range ${addressRange(host)}), which is not allowed`;
  }
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
