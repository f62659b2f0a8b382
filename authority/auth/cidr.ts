/**
 * IP allowlists of API keys.
 *
 * @example
 *   const allow = compileAllowlist(['10.0.0.0/8']);
 *   allow('10.1.2.3'); // true
 *   allow('::ffff:10.1.2.3'); // true: IPv4-mapped IPv6 is the IPv4 address
 */
import { BlockList, isIP } from 'node:net';
import { parseCidr } from '../../shared/wire/api-keys.js';

export type Allowlist = (ip: string) => boolean;

const MAPPED_V4 = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i;

export function compileAllowlist(cidrs: readonly string[]): Allowlist {
  const list = new BlockList();
  for (const cidr of cidrs) {
    const parsed = parseCidr(cidr);
    if (parsed) list.addSubnet(parsed.address, parsed.prefix, parsed.family);
  }
  return (ip) => {
    const address = MAPPED_V4.exec(ip)?.[1] ?? ip;
    const version = isIP(address);
    if (version === 0) return false;
    return list.check(address, version === 4 ? 'ipv4' : 'ipv6');
  };
}
