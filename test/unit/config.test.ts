/** Configuration: defaults, authority.yaml, environment overrides, and errors that name the field. */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { ConfigError, loadAuthorityConfig } from '../../authority/config.js';

const yamlFile = async (text: string) => {
  const file = join(await mkdtemp(join(tmpdir(), 'cs-config-')), 'authority.yaml');
  await writeFile(file, text);
  return file;
};

t.test('defaults: embedded data dir, loopback ports, community limits', async (t) => {
  const config = await loadAuthorityConfig({ env: {} });
  t.same(config.listen, { host: '127.0.0.1', port: 7070 });
  t.same(config.admin_listen, { host: '127.0.0.1', port: 7071 });
  t.equal(config.data_dir, './.countersign');
  t.equal(config.database_url, undefined);
  t.equal(config.deployment, 'self_hosted');
  t.same(config.rate_limits.evaluate, { per_minute: 100, burst: 100 });
  t.same(config.rate_limits.plans.community, { per_minute: 100, burst: 150 });
  t.same(config.rate_limits.plans.business, { per_minute: 1000, burst: 2000 });
  t.equal(config.auth.x_service_key.enabled, true);
});

t.test('the environment overrides the file, the file the defaults', async (t) => {
  const file = await yamlFile('listen: 0.0.0.0:8000\nadmin_listen: 127.0.0.1:9000\nlog_level: warn\n');
  const config = await loadAuthorityConfig({
    file,
    env: { COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:7777', DATABASE_URL: 'postgres://x@y/z', REDIS_URL: 'redis://r:6379', COUNTERSIGN_DATA_DIR: '/var/lib/cs' },
  });
  t.same(config.listen, { host: '127.0.0.1', port: 7777 }, 'env wins');
  t.same(config.admin_listen, { host: '127.0.0.1', port: 9000 }, 'file beats default');
  t.equal(config.log_level, 'warn');
  t.equal(config.database_url, 'postgres://x@y/z');
  t.equal(config.redis_url, 'redis://r:6379');
  t.equal(config.data_dir, '/var/lib/cs');
  const viaEnvName = await loadAuthorityConfig({ env: { COUNTERSIGN_CONFIG: file } });
  t.same(viaEnvName.listen, { host: '0.0.0.0', port: 8000 }, 'COUNTERSIGN_CONFIG names the file');
  const ipv6 = await loadAuthorityConfig({ env: { COUNTERSIGN_AUTHORITY_LISTEN: '[::1]:7070' } });
  t.same(ipv6.listen, { host: '::1', port: 7070 });
});

t.test('errors name the bad field', async (t) => {
  const file = await yamlFile('rate_limits:\n  plans:\n    team: { per_minute: -1, burst: 10 }\nauth:\n  jwt: { issuer: x, audience: y }\nsurprise: 1\n');
  const error = await loadAuthorityConfig({ file, env: {} }).catch((e: unknown) => e);
  t.type(error, ConfigError);
  const message = (error as Error).message;
  t.match(message, /rate_limits\.plans\.team\.per_minute/);
  t.match(message, /auth\.jwt: give exactly one of jwks_url and jwks_file/);
  t.match(message, /surprise/);
  await t.rejects(loadAuthorityConfig({ env: { COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:99999' } }), /listen: port must be at most 65535/);
  await t.rejects(loadAuthorityConfig({ file: '/nonexistent/authority.yaml', env: {} }), /cannot read/);
  await t.rejects(loadAuthorityConfig({ file: await yamlFile('listen: [unclosed'), env: {} }), /not valid YAML/);
  await t.rejects(loadAuthorityConfig({ file: await yamlFile('- a list'), env: {} }), /must hold a mapping/);
});

t.test('the example config/authority.yaml is valid and states the defaults, but for private webhook targets, the console API-key sign-in and the rate limits', async (t) => {
  const fromExample = await loadAuthorityConfig({ file: 'config/authority.yaml', env: {} });
  const defaults = await loadAuthorityConfig({ env: {} });
  t.equal(defaults.webhooks.allow_private_targets, false, 'refused by default');
  t.equal(fromExample.webhooks.allow_private_targets, true, 'allowed in the development configuration (a receiver on localhost)');
  t.equal(defaults.console.api_key_sign_in, false, 'no console sign-in with an API key by default');
  t.equal(fromExample.console.api_key_sign_in, true, 'but in the development configuration (no identity provider there)');
  t.same(defaults.rate_limits.evaluate, { per_minute: 100, burst: 100 }, 'production: evaluate 100 a minute per organization');
  t.same(defaults.rate_limits.plans.community, { per_minute: 100, burst: 150 }, 'production: the community plan, 100 a minute');
  t.same(fromExample.rate_limits.evaluate, { per_minute: 6000, burst: 1000 }, "development: a developer's loop is not refused");
  t.same(fromExample.rate_limits.plans.community, { per_minute: 6000, burst: 1000 }, 'development: nor on the plan of the organization `default`');
  t.same(fromExample, {
    ...defaults,
    webhooks: { ...defaults.webhooks, allow_private_targets: true },
    console: { ...defaults.console, api_key_sign_in: true },
    rate_limits: { ...defaults.rate_limits, evaluate: fromExample.rate_limits.evaluate, plans: { ...defaults.rate_limits.plans, community: fromExample.rate_limits.plans.community } },
  });
});
