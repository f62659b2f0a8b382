/**
 * The pure parts of webhook delivery: which addresses are refused without
 * `allow_private_targets`, URLs refused before any lookup, the connect-time lookup filter, and
 * the retry delay (schedule entry ± jitter, the last entry repeating).
 */
import t from 'tap';
import { addressRange, filteringLookup, isForbiddenAddress, literalTargetProblem } from '../../authority/webhooks/targets.js';
import { retryDelayMs } from '../../authority/webhooks/worker.js';

t.test('private, loopback, link-local and reserved addresses are forbidden; public ones are not', async (t) => {
  for (const address of ['127.0.0.1', '10.2.3.4', '172.16.0.1', '172.31.255.255', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '224.0.0.1', '::1', '::', 'fe80::1', 'fd00::1', '::ffff:127.0.0.1', '::ffff:7f00:1', '64:ff9b::a00:1', '[::1]', 'not-an-ip']) {
    t.ok(isForbiddenAddress(address), `${address} is forbidden`);
  }
  for (const address of ['93.184.216.34', '8.8.8.8', '172.32.0.1', '2606:4700::1111', '::ffff:8.8.8.8']) {
    t.notOk(isForbiddenAddress(address), `${address} is allowed`);
  }
});

/** Every special-purpose or translated form an attacker could use, and one of each IANA special-purpose range. */
const REFUSED: Array<[address: string, range: RegExp]> = [
  // IPv4 special-purpose (RFC 6890 and later)
  ['0.1.2.3', /unspecified/], ['10.0.0.1', /private/], ['100.64.0.1', /carrierGradeNat/], ['127.0.0.1', /loopback/],
  ['127.255.255.254', /loopback/], ['169.254.169.254', /linkLocal/], ['172.16.0.1', /private/], ['192.0.0.8', /reserved/],
  ['192.0.2.1', /reserved/], ['192.31.196.1', /as112/], ['192.52.193.1', /amt/], ['192.88.99.1', /reserved/],
  ['192.168.0.1', /private/], ['192.175.48.1', /as112/], ['198.18.0.1', /reserved/], ['198.51.100.1', /reserved/],
  ['203.0.113.1', /reserved/], ['224.0.0.1', /multicast/], ['240.0.0.1', /reserved/], ['255.255.255.255', /broadcast/],
  // IPv6 special-purpose
  ['::', /unspecified/], ['::1', /loopback/], ['[::1]', /loopback/], ['fe80::1', /linkLocal/], ['fe80::1%eth0', /linkLocal/],
  ['fc00::1', /uniqueLocal/], ['fd12:3456::1', /uniqueLocal/], ['fec0::1', /deprecatedSiteLocal/], ['feff::1', /deprecatedSiteLocal/],
  ['ff02::1', /multicast/], ['100::1', /discard/], ['2001::1', /teredo/], ['2001:2::1', /benchmarking/], ['2001:3::1', /amt/],
  ['2001:4:112::1', /as112v6/], ['2001:10::1', /deprecatedOrchid/], ['2001:20::1', /orchid2/], ['2001:30::1', /droneRemoteId/],
  ['2001:db8::1', /reserved/], ['3fff::1', /reserved/], ['5f00::1', /segmentRouting/], ['4000::1', /unallocated/],
  // IPv4 inside IPv6: judged by the IPv4 address they lead to
  ['::127.0.0.1', /unallocated/], ['[::127.0.0.1]', /unallocated/], ['::7f00:1', /unallocated/], ['::10.0.0.1', /unallocated/],
  ['::ffff:127.0.0.1', /ipv4Mapped → loopback/], ['::ffff:7f00:1', /ipv4Mapped → loopback/], ['::ffff:169.254.169.254', /→ linkLocal/],
  ['::ffff:0:127.0.0.1', /rfc6145 → loopback/], ['[::ffff:0:127.0.0.1]', /rfc6145 → loopback/], ['::ffff:0:10.1.2.3', /rfc6145 → private/],
  ['64:ff9b::127.0.0.1', /rfc6052 → loopback/], ['64:ff9b::a00:1', /rfc6052 → private/], ['64:ff9b::a9fe:a9fe', /rfc6052 → linkLocal/],
  ['64:ff9b:1::1', /rfc6052$/], ['64:ff9b:1:7f00:1::', /rfc6052$/], ['64:ff9b:1::808:808', /rfc6052$/],
  ['2002:7f00:1::', /6to4 → loopback/], ['2002:a00:1::1', /6to4 → private/], ['2002:c0a8:101::1', /6to4 → private/], ['2002::1', /6to4 → unspecified/],
  // not an address at all: nothing to vouch for
  ['not-an-ip', /invalid/], ['', /invalid/], ['1.2.3', /invalid/],
];
const ALLOWED = ['8.8.8.8', '93.184.216.34', '172.32.0.1', '1.1.1.1', '2606:4700::1111', '2a00:1450:4001::200e', '[2001:4860:4860::8888]', '::ffff:8.8.8.8', '::ffff:0:8.8.8.8', '64:ff9b::8.8.8.8', '2002:808:808::1'];

t.test('addresses are classified by ipaddr.js range: only (translated) unicast is allowed', async (t) => {
  for (const [address, range] of REFUSED) {
    t.ok(isForbiddenAddress(address), `${address} is forbidden`);
    t.match(addressRange(address), range, `${address} is ${String(range)}`);
  }
  for (const address of ALLOWED) {
    t.notOk(isForbiddenAddress(address), `${address} is allowed (${addressRange(address)})`);
  }
});

t.test('URLs naming embedded or translated IPv4 forms are refused up front', async (t) => {
  for (const host of ['[::127.0.0.1]', '[::ffff:0:127.0.0.1]', '[64:ff9b::7f00:1]', '[64:ff9b:1::a00:1]', '[2002:7f00:1::]', '[fec0::1]', '[::ffff:169.254.169.254]', '0x7f.1', '2130706433']) {
    const url = `http://${host}:8080/hook`;
    t.match(literalTargetProblem(url, false), /not allowed/, url);
    t.equal(literalTargetProblem(url, true), null, `${url} with private targets allowed`);
  }
  t.equal(literalTargetProblem('http://[2606:4700::1111]/x', false), null);
  t.equal(literalTargetProblem('http://[64:ff9b::808:808]/x', false), null, 'NAT64 of a public address');
});

t.test('URLs naming a forbidden address or localhost are refused up front, unless allowed', async (t) => {
  for (const url of ['http://127.0.0.1/', 'http://[::1]:8080/', 'http://localhost/', 'http://LOCALHOST./x', 'http://api.localhost/', 'https://10.0.0.1/']) {
    t.type(literalTargetProblem(url, false), 'string', url);
    t.equal(literalTargetProblem(url, true), null, `${url} with private targets allowed`);
  }
  t.equal(literalTargetProblem('https://hooks.example.com/x', false), null, 'names are checked when they are resolved');
});

t.test('the connect-time lookup drops forbidden answers and fails when none is left', async (t) => {
  const resolve = (answers: string[]) => (_host: string, _options: unknown, callback: (e: null, a: Array<{ address: string; family: number }>) => void) =>
    callback(null, answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })));
  const ask = (lookup: ReturnType<typeof filteringLookup>, all: boolean) =>
    new Promise<{ error: Error | null; result: unknown }>((done) => lookup('hooks.example.com', { all } as never, (error: Error | null, address: unknown) => done({ error, result: address })));

  const mixed = filteringLookup({ allowPrivate: false, resolve: resolve(['10.0.0.5', '93.184.216.34']) });
  t.same(await ask(mixed, false), { error: null, result: '93.184.216.34' }, 'only the public answer is used');
  t.same((await ask(mixed, true)).result, [{ address: '93.184.216.34', family: 4 }]);
  const privateOnly = await ask(filteringLookup({ allowPrivate: false, resolve: resolve(['127.0.0.1', '::1']) }), false);
  t.match(privateOnly.error, { code: 'WEBHOOK_TARGET_FORBIDDEN' }, 'a name resolving only to private addresses is refused');
  t.same(await ask(filteringLookup({ allowPrivate: true, resolve: resolve(['127.0.0.1']) }), false), { error: null, result: '127.0.0.1' }, 'allowed when configured');
  const translated = ['::7f00:1', '::ffff:0:7f00:1', '64:ff9b::a00:1', '64:ff9b:1::a00:1', '2002:7f00:1::', 'fec0::1'];
  const onlyTranslated = await ask(filteringLookup({ allowPrivate: false, resolve: resolve(translated) }), true);
  t.match(onlyTranslated.error, { code: 'WEBHOOK_TARGET_FORBIDDEN' }, 'embedded and translated IPv4 forms are dropped at connect time');
  t.same((await ask(filteringLookup({ allowPrivate: false, resolve: resolve([...translated, '64:ff9b::808:808']) }), false)).result, '64:ff9b::808:808');
});

t.test('retry delay: the schedule entry for the round, ± jitter, the last entry repeating', async (t) => {
  const config = { retry_schedule_ms: [5_000, 300_000, 1_800_000], jitter: 0.2 };
  t.equal(retryDelayMs(config, 1, () => 0.5), 5_000, 'no jitter at the midpoint');
  t.equal(retryDelayMs(config, 1, () => 0), 4_000, '-20 %');
  t.equal(retryDelayMs(config, 2, () => 0.999_999_9), 360_000, '+20 % (almost)');
  t.equal(retryDelayMs(config, 7, () => 0.5), 1_800_000, 'past the schedule: its last entry');
  t.equal(retryDelayMs({ ...config, jitter: 0 }, 3, Math.random), 1_800_000, 'jitter 0: exactly the schedule');
});
