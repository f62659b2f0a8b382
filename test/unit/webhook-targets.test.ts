/**
 * The pure parts of webhook delivery: which addresses are refused without
 * `allow_private_targets`, URLs refused before any lookup, the connect-time lookup filter, and
 * the retry delay (schedule entry ± jitter, the last entry repeating).
 */
import t from 'tap';
import { filteringLookup, isForbiddenAddress, literalTargetProblem } from '../../authority/webhooks/targets.js';
import { retryDelayMs } from '../../authority/webhooks/worker.js';

t.test('private, loopback, link-local and reserved addresses are forbidden; public ones are not', async (t) => {
  for (const address of ['127.0.0.1', '10.2.3.4', '172.16.0.1', '172.31.255.255', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '224.0.0.1', '::1', '::', 'fe80::1', 'fd00::1', '::ffff:127.0.0.1', '::ffff:7f00:1', '64:ff9b::a00:1', '[::1]', 'not-an-ip']) {
    t.ok(isForbiddenAddress(address), `${address} is forbidden`);
  }
  for (const address of ['93.184.216.34', '8.8.8.8', '172.32.0.1', '2606:4700::1111', '::ffff:8.8.8.8']) {
    t.notOk(isForbiddenAddress(address), `${address} is allowed`);
  }
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
});

t.test('retry delay: the schedule entry for the round, ± jitter, the last entry repeating', async (t) => {
  const config = { retry_schedule_ms: [5_000, 300_000, 1_800_000], jitter: 0.2 };
  t.equal(retryDelayMs(config, 1, () => 0.5), 5_000, 'no jitter at the midpoint');
  t.equal(retryDelayMs(config, 1, () => 0), 4_000, '-20 %');
  t.equal(retryDelayMs(config, 2, () => 0.999_999_9), 360_000, '+20 % (almost)');
  t.equal(retryDelayMs(config, 7, () => 0.5), 1_800_000, 'past the schedule: its last entry');
  t.equal(retryDelayMs({ ...config, jitter: 0 }, 3, Math.random), 1_800_000, 'jitter 0: exactly the schedule');
});
