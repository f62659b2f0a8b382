/** API key secrets, hashing, IP allowlists and role permissions. */
import t from 'tap';
import { displayPrefix, generateApiKeySecret, hashApiKeySecret, hashesEqual, isApiKeySecret } from '../../authority/api-keys/secret.js';
import { compileAllowlist } from '../../authority/auth/cidr.js';
import { permissionsOf } from '../../authority/auth/roles.js';
import { parseCidr } from '../../shared/wire/api-keys.js';
import { SCOPES } from '../../shared/wire/scopes.js';

t.test('secrets: ask_live_/ask_test_ with 40 base62 characters, unique, hashed with SHA-256', async (t) => {
  const seen = new Set<string>();
  for (let i = 0; i < 200; i += 1) seen.add(generateApiKeySecret('live'));
  t.equal(seen.size, 200, 'no repeats');
  for (const secret of seen) t.match(secret, /^ask_live_[A-Za-z0-9]{40}$/);
  t.match(generateApiKeySecret('test'), /^ask_test_[A-Za-z0-9]{40}$/);
  const secret = generateApiKeySecret('live');
  t.ok(isApiKeySecret(secret));
  t.notOk(isApiKeySecret('ask_prod_' + 'a'.repeat(40)));
  t.notOk(isApiKeySecret('ask_live_short'));
  t.match(hashApiKeySecret(secret), /^[0-9a-f]{64}$/);
  t.equal(hashApiKeySecret('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  t.ok(hashesEqual(hashApiKeySecret(secret), hashApiKeySecret(secret)));
  t.notOk(hashesEqual(hashApiKeySecret(secret), hashApiKeySecret('other')));
  t.notOk(hashesEqual('00', '0000'), 'different lengths never compare equal');
  t.equal(displayPrefix(secret), secret.slice(0, 13));
});

t.test('allowlists: IPv4, IPv6, mapped IPv4, bare addresses', async (t) => {
  const allow = compileAllowlist(['10.0.0.0/8', '2001:db8::/32', '192.0.2.5']);
  t.ok(allow('10.200.1.1'));
  t.ok(allow('::ffff:10.1.1.1'), 'IPv4-mapped IPv6 counts as IPv4');
  t.ok(allow('2001:db8::1'));
  t.ok(allow('192.0.2.5'));
  t.notOk(allow('192.0.2.6'));
  t.notOk(allow('11.0.0.1'));
  t.notOk(allow('2001:db9::1'));
  t.notOk(allow('not-an-ip'));
  t.notOk(compileAllowlist([])('127.0.0.1'), 'an empty list allows nothing');
  t.same(parseCidr('10.0.0.0/8'), { address: '10.0.0.0', prefix: 8, family: 'ipv4' });
  t.equal(parseCidr('10.0.0.0/33'), null);
  t.equal(parseCidr('10.0.0.0/8/1'), null);
  t.equal(parseCidr('example.com/8'), null);
  t.equal(parseCidr('10.0.0.0/x'), null);
});

t.test('roles carry the permissions of the design', async (t) => {
  t.same([...permissionsOf('admin')].sort(), [...SCOPES].sort(), 'admin: everything');
  t.same([...permissionsOf('member')].sort(), ['evaluate:write', 'permits:read', 'verify:execute']);
  t.same([...permissionsOf('viewer')].sort(), ['audit:read', 'permits:read', 'policy:read']);
  t.ok(permissionsOf('approver').has('hitl:approve'));
  t.notOk(permissionsOf('approver').has('keys:write'));
});
