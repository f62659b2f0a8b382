/**
 * The proxy refuses to start with the example's placeholder organization (PROXY_CONFIG_INVALID,
 * exit 2 from `countersign proxy`), starts when COUNTERSIGN_PROXY_ORGANIZATION gives the real one
 * (as `countersign start` does), and refuses a reload back to the placeholder like any other bad
 * reload: the running configuration stays and the reload metric reads 0.
 */
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { startProxy } from '../../proxy/main.js';
import { PLACEHOLDER_ORGANIZATION } from '../../proxy/organization.js';

/** The example file with listeners on port 0, an inline key and an authority nobody answers at. */
async function exampleCopy(organization: string): Promise<string> {
  const text = (await readFile('config/proxy.yaml', 'utf8'))
    .replace(/^listen: .*$/m, 'listen: 127.0.0.1:0')
    .replace(/^admin_listen: .*$/m, 'admin_listen: 127.0.0.1:0')
    .replace(/^ {2}url: .*$/m, '  url: http://127.0.0.1:9')
    .replace(/^ {2}api_key_file: .*$/m, '  api_key: ask_test_placeholder')
    .replace(/^organization: .*$/m, `organization: ${organization}`);
  const file = join(await mkdtemp(join(tmpdir(), 'cs-proxy-org-')), 'proxy.yaml');
  await writeFile(file, text);
  return file;
}

const options = { allowInProcessStore: true, watch: false, logger: pino({ level: 'silent' }) };

t.test('the placeholder organization stops the start, naming what to set', async (t) => {
  const file = await exampleCopy(PLACEHOLDER_ORGANIZATION);
  await t.rejects(startProxy(file, { ...options, env: {} }), { code: 'PROXY_CONFIG_INVALID', message: /organization: still the placeholder.*COUNTERSIGN_PROXY_ORGANIZATION/s });
});

t.test('COUNTERSIGN_PROXY_ORGANIZATION replaces the placeholder; a reload back to it is refused', async (t) => {
  const file = await exampleCopy(PLACEHOLDER_ORGANIZATION);
  const proxy = await startProxy(file, { ...options, env: { COUNTERSIGN_PROXY_ORGANIZATION: 'org_real' } });
  t.teardown(() => proxy.close());
  t.equal(proxy.config().organization, 'org_real', 'what countersign start relies on');
  t.equal(await proxy.reload(), true, 'a reload with the variable still set applies');

  const direct = await exampleCopy('org_direct');
  const running = await startProxy(direct, { ...options, env: {} });
  t.teardown(() => running.close());
  t.equal(running.config().organization, 'org_direct');
  await writeFile(direct, (await readFile(direct, 'utf8')).replace(/^organization: .*$/m, `organization: ${PLACEHOLDER_ORGANIZATION}`));
  t.equal(await running.reload(), false, 'a reload to the placeholder is refused');
  t.equal(running.config().organization, 'org_direct', 'the last good configuration stays in force');
  t.match(await running.metrics.registry.getSingleMetricAsString('countersign_proxy_config_reload_success'), /countersign_proxy_config_reload_success 0/);
});
