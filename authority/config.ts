/**
 * The authority's configuration: defaults < authority.yaml < environment.
 *
 * @example
 *   const config = await loadAuthorityConfig({ file: 'config/authority.yaml', env: process.env });
 *   config.listen; // { host: '127.0.0.1', port: 7070 }
 */
import { z } from 'zod';
import { formatIssues, hostPort, readConfigMapping, withEnvOverrides } from '../shared/config-file.js';
import { JWT_ISSUER_FIELDS, ONE_KEY_SOURCE } from '../shared/jwt/verify.js';
import { DEFAULT_STORE_SETTINGS, StoreSettings, storeSettingsWithEnv } from '../shared/store/config.js';
import { DEFAULT_MAX_JSON_DEPTH } from '../shared/wire/recordable-value.js';
import { AUTHZEN_DEFAULTS, AuthzenSettings } from './authzen/settings.js';
import { CONSOLE_DEFAULTS, ConsoleConfig } from './console/config.js';

export { formatIssues };

export const PLANS = ['community', 'team', 'business', 'enterprise'] as const;
export type Plan = (typeof PLANS)[number];

const HostPort = hostPort('127.0.0.1:7070');

const Bucket = z
  .object({
    per_minute: z.number().int().positive(),
    burst: z.number().int().positive(),
  })
  .strict();
export type BucketConfig = z.infer<typeof Bucket>;

const JwtConfig = z
  .object({
    ...JWT_ISSUER_FIELDS,
    claims: z
      .object({
        user: z.string().min(1).default('sub'),
        organization: z.string().min(1).default('org_id'),
        role: z.string().min(1).default('role'),
        email: z.string().min(1).default('email'),
      })
      .strict()
      .default({ user: 'sub', organization: 'org_id', role: 'role', email: 'email' }),
  })
  .strict()
  .refine(ONE_KEY_SOURCE.check, { message: ONE_KEY_SOURCE.message });
export type JwtConfig = z.infer<typeof JwtConfig>;

const DEFAULT_PLANS = {
  community: { per_minute: 100, burst: 150 },
  team: { per_minute: 300, burst: 600 },
  business: { per_minute: 1000, burst: 2000 },
  enterprise: { per_minute: 5000, burst: 10000 },
};

/** Failed or credential-less requests per client address: a client retrying by hand never meets it. */
const DEFAULT_UNAUTHENTICATED_LIMIT = { per_minute: 60, burst: 120 };

/** docs/webhooks.md, "Retries and dead letters": retry after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h. */
export const DEFAULT_RETRY_SCHEDULE_MS = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];

const WEBHOOK_CONFIG_DEFAULTS = {
  allow_private_targets: false,
  retry_schedule_ms: DEFAULT_RETRY_SCHEDULE_MS,
  jitter: 0.2,
  worker_interval_ms: 1_000,
  batch_size: 50,
  lease_margin_ms: 30_000,
};

const WebhooksConfig = z
  .object({
    /**
     * Deliver to targets that resolve to private, loopback or link-local addresses. Off by
     * default (a webhook URL must not reach the authority's own network); development and tests
     * turn it on to deliver to a receiver on localhost.
     */
    allow_private_targets: z.boolean().default(false),
    /** The wait after the 1st, 2nd, … failed attempt; the last entry repeats for longer rounds. */
    retry_schedule_ms: z.array(z.number().int().min(0).max(7 * 24 * 3600 * 1000)).min(1).max(50).default(DEFAULT_RETRY_SCHEDULE_MS),
    /** Each wait is randomised by up to ± this fraction (0.2 = ±20 %), so retries do not stampede. */
    jitter: z.number().min(0).max(1).default(0.2),
    /** How often a worker looks for due deliveries. */
    worker_interval_ms: z.number().int().min(10).max(3_600_000).default(1_000),
    /** Deliveries one worker pass claims and sends at once. */
    batch_size: z.number().int().min(1).max(1_000).default(50),
    /** A claimed attempt's lease beyond its timeout: after it, a stopped worker's attempt is sent again. */
    lease_margin_ms: z.number().int().min(0).max(3_600_000).default(30_000),
  })
  .strict();
export type WebhooksConfig = z.infer<typeof WebhooksConfig>;

export const AuthorityConfig = z
  .object({
    listen: HostPort.default({ host: '127.0.0.1', port: 7070 }),
    admin_listen: HostPort.default({ host: '127.0.0.1', port: 7071 }),
    data_dir: z.string().min(1).default('./.countersign'),
    database_url: z.string().min(1).optional(),
    redis_url: z.string().min(1).optional(),
    /** Postgres without Redis means replicas would not share replay state and rate limits. */
    allow_in_process_store: z.boolean().default(false),
    /** Redis topology and durability (shared/store/config.ts); used when Redis is configured. */
    store: StoreSettings.default(DEFAULT_STORE_SETTINGS),
    /** Request bounds checked at the edge (authority/http/bounded-input.ts). */
    limits: z
      .object({ json_depth: z.number().int().min(2).max(256).default(DEFAULT_MAX_JSON_DEPTH) })
      .strict()
      .default({ json_depth: DEFAULT_MAX_JSON_DEPTH }),
    deployment: z.enum(['self_hosted', 'hosted']).default('self_hosted'),
    log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** Passed to fastify: true, or the addresses/CIDRs of trusted proxies, for X-Forwarded-For. */
    trust_proxy: z.union([z.boolean(), z.array(z.string().min(1))]).default(false),
    auth: z
      .object({
        x_service_key: z.object({ enabled: z.boolean().default(true) }).strict().default({ enabled: true }),
        jwt: JwtConfig.optional(),
      })
      .strict()
      .default({ x_service_key: { enabled: true } }),
    /** base64 of 32 random bytes; encrypts secrets at rest. Embedded mode makes <data_dir>/secret.key when unset. */
    secret_key: z.string().min(1).optional(),
    permits: z
      .object({
        issuer: z.string().min(1).default('countersign'),
        audience: z.string().min(1).default('countersign:gate'),
      })
      .strict()
      .default({ issuer: 'countersign', audience: 'countersign:gate' }),
    signing: z
      .object({
        /** PEM (PKCS#8) Ed25519 private keys; the first signs, the others stay published. Empty: generated keys. */
        permit_key_files: z.array(z.string().min(1)).default([]),
        audit_key_files: z.array(z.string().min(1)).default([]),
        /** A rotated-in key is published this long before it signs, so every gate has it. */
        publish_before_use_seconds: z.number().int().min(0).max(86_400).default(120),
      })
      .strict()
      .default({ permit_key_files: [], audit_key_files: [], publish_before_use_seconds: 120 }),
    audit: z
      .object({ checkpoint_interval_seconds: z.number().int().min(1).default(300) })
      .strict()
      .default({ checkpoint_interval_seconds: 300 }),
    escalations: z
      .object({
        /**
         * An escalation created with a riskScore below this is auto_approved at once. null: off
         * (every escalation waits for its approvers).
         */
        auto_approve_below: z.number().min(0).max(1).nullable().default(null),
        /** The time a tier has when the request names none (the policy default is one hour too). */
        default_timeout_ms: z.number().int().positive().max(30 * 24 * 3600 * 1000).default(3_600_000),
        /** How often timed-out escalations are recorded in the background (reads apply them anyway). */
        sweep_interval_ms: z.number().int().min(100).max(3_600_000).default(5_000),
        /** Per-organization overrides by organization id. */
        organizations: z
          .record(z.string(), z.object({ auto_approve_below: z.number().min(0).max(1).nullable() }).strict())
          .default({}),
      })
      .strict()
      .default({ auto_approve_below: null, default_timeout_ms: 3_600_000, sweep_interval_ms: 5_000, organizations: {} }),
    webhooks: WebhooksConfig.default(WEBHOOK_CONFIG_DEFAULTS),
    console: ConsoleConfig.default(ConsoleConfig.parse(CONSOLE_DEFAULTS)),
    /** The policy loaded into organization `default` on first start; unset: the example shipped in config/policies/. */
    bootstrap_policy: z.string().min(1).optional(),
    /** The AuthZEN facade: how its action names become action types. */
    authzen: AuthzenSettings.default(AUTHZEN_DEFAULTS),
    rate_limits: z
      .object({
        evaluate: Bucket.default({ per_minute: 100, burst: 100 }),
        plans: z
          .object({
            community: Bucket.default(DEFAULT_PLANS.community),
            team: Bucket.default(DEFAULT_PLANS.team),
            business: Bucket.default(DEFAULT_PLANS.business),
            enterprise: Bucket.default(DEFAULT_PLANS.enterprise),
          })
          .strict()
          .default(DEFAULT_PLANS),
        /** Per-organization overrides by organization id. */
        organizations: z
          .record(z.string(), z.object({ api: Bucket.optional(), evaluate: Bucket.optional() }).strict())
          .default({}),
        /**
         * Per client address (request.ip, so behind a proxy set trust_proxy), in each process: requests
         * without a valid credential or the route's permission, which no organization can be charged for.
         */
        unauthenticated: Bucket.default(DEFAULT_UNAUTHENTICATED_LIMIT),
      })
      .strict()
      .default({ evaluate: { per_minute: 100, burst: 100 }, plans: DEFAULT_PLANS, organizations: {}, unauthenticated: DEFAULT_UNAUTHENTICATED_LIMIT }),
  })
  .strict()
  .refine((config) => config.console.oidc === undefined || config.auth.jwt !== undefined, {
    message: 'console.oidc signs in with the identity provider of auth.jwt: configure auth.jwt (issuer, audience, keys) too',
    path: ['console', 'oidc'],
  });

export type AuthorityConfig = z.infer<typeof AuthorityConfig>;
export type AuthorityConfigInput = z.input<typeof AuthorityConfig>;

/** A configuration problem, with the path of every bad field. */
export class ConfigError extends Error {
  readonly code = 'CONFIG_INVALID';
}

/** Parses an already-assembled object (tests build configurations this way). */
export function parseAuthorityConfig(input: unknown, source = 'configuration'): AuthorityConfig {
  const result = AuthorityConfig.safeParse(input);
  if (!result.success) throw new ConfigError(formatIssues(source, result.error));
  return result.data;
}

const ENV_OVERRIDES: Array<[env: string, key: keyof AuthorityConfigInput]> = [
  ['COUNTERSIGN_AUTHORITY_LISTEN', 'listen'],
  ['COUNTERSIGN_AUTHORITY_ADMIN_LISTEN', 'admin_listen'],
  ['COUNTERSIGN_DATA_DIR', 'data_dir'],
  ['DATABASE_URL', 'database_url'],
  ['REDIS_URL', 'redis_url'],
  ['COUNTERSIGN_LOG_LEVEL', 'log_level'],
  ['COUNTERSIGN_SECRET_KEY', 'secret_key'],
];

export interface LoadOptions {
  /** authority.yaml; `COUNTERSIGN_CONFIG` names it when this is not given. */
  file?: string | undefined;
  env?: NodeJS.ProcessEnv;
}

export async function loadAuthorityConfig(options: LoadOptions = {}): Promise<AuthorityConfig> {
  const env = options.env ?? process.env;
  const file = options.file ?? env.COUNTERSIGN_CONFIG;
  const fromFile = file !== undefined && file !== '' ? await readConfigMapping(file, (message) => new ConfigError(message)) : {};
  const merged = withEnvOverrides(fromFile, ENV_OVERRIDES, env);
  merged.store = storeSettingsWithEnv(merged.store, env);
  if (env.COUNTERSIGN_ALLOW_IN_PROCESS_STORE === '1' || env.COUNTERSIGN_ALLOW_IN_PROCESS_STORE === 'true') {
    merged.allow_in_process_store = true;
  }
  return parseAuthorityConfig(merged, file ?? 'configuration');
}
