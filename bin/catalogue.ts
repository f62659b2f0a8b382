/**
 * Every `countersign` command and subcommand, described once: the top-level help, each
 * command's `--help`, the usage printed with a usage error and docs/cli.md are all rendered from
 * this list (bin/help.ts), so they cannot drift apart. Plain data: loading it loads nothing else.
 *
 * @example
 *   const entry = findCommand('keys create');
 *   entry?.examples[0]?.command; // 'countersign keys create --org acme --name ci --scopes …'
 */

export interface CommandOption {
  /** As typed, with its value: `--org ORG`. */
  flag: string;
  /** What it means, its default, whether it is required. */
  text: string;
}

export interface CommandExample {
  command: string;
  /** One line saying what the example does. */
  comment?: string;
}

export interface CommandEntry {
  /** `start`, `keys create`: what follows `countersign`. */
  name: string;
  summary: string;
  /** Synopsis lines, each starting with the command name. */
  usage: string[];
  options: CommandOption[];
  examples: CommandExample[];
  notes?: string[];
  /**
   * How to get the same result while a server holds the embedded data directory and cannot run
   * the command itself (a server without the admin channel, or stopping): said in the exit-3
   * message. Absent: only stopping the server helps.
   */
  whileRunning?: string;
}

export const CONFIG_OPTION: CommandOption = {
  flag: '--config FILE',
  text: 'the authority configuration (authority.yaml); default: $COUNTERSIGN_CONFIG, else the built-in defaults (data in ./.countersign)',
};

/** The exit codes every command keeps to; in the top-level help and docs/cli.md. */
export const EXIT_CODES: ReadonlyArray<readonly [code: number, meaning: string]> = [
  [0, 'success'],
  [1, 'the operation failed: verification or a policy test failed, decisions would change, the database is unreachable, a server error'],
  [2, 'usage error: unknown command or option, a missing or bad argument, an invalid configuration file or policy (test) file'],
  [3, 'the embedded data directory is in use by a running server that could not run the command (stop it, use the API, or use Postgres)'],
];

export const ENVIRONMENT: ReadonlyArray<readonly [name: string, meaning: string]> = [
  ['COUNTERSIGN_CONFIG', 'the authority configuration file when --config is not given'],
  ['COUNTERSIGN_DATA_DIR', 'the embedded data directory (default ./.countersign)'],
  ['DATABASE_URL', 'Postgres instead of the embedded database; administration commands then work while servers run'],
  ['COUNTERSIGN_SECRET_KEY', 'base64 of 32 bytes that encrypts the signing keys (required with DATABASE_URL)'],
  ['COUNTERSIGN_API_KEY', 'the API key audit verify --authority sends (scope audit:read)'],
  ['COUNTERSIGN_PROXY_UPSTREAM', 'the protected system the proxy forwards to (start: instead of the demo upstream)'],
];

/** Said by every command that the server holding the embedded database runs instead. */
const RUN_BY_SERVER =
  'With the embedded database, while a server (start or authority) holds it, the command is run by that server, through its admin listener on this machine; the output is the same.';

/** In `whileRunning`: {api} is the API address, {bootstrap} the data directory's bootstrap.json. */
const BOOTSTRAP_KEY = '$(jq -r .api_key {bootstrap})';

export const COMMANDS: readonly CommandEntry[] = [
  {
    name: 'start',
    summary: 'run the authority and the proxy in one process, in front of a demo upstream or your application (npm start)',
    usage: ['start [--config FILE] [--proxy-config FILE] [--upstream URL | --upstream-listen HOST:PORT] [--organization ORG]'],
    options: [
      {
        flag: '--config FILE',
        text: "the authority configuration (authority.yaml); default: $COUNTERSIGN_CONFIG, else the development configuration shipped with Countersign (its config/authority.yaml: the console's API-key sign-in and webhooks to localhost on, data in ./.countersign)",
      },
      { flag: '--proxy-config FILE', text: "the proxy configuration, whose routes say which requests need a permit (default: the example shipped with Countersign, its config/proxy.yaml)" },
      { flag: '--upstream URL', text: 'put the proxy in front of your application at URL (http or https) instead of the demo upstream; same as COUNTERSIGN_PROXY_UPSTREAM' },
      { flag: '--upstream-listen HOST:PORT', text: 'where the demo upstream listens (default 127.0.0.1:7090); not with --upstream' },
      { flag: '--organization ORG', text: 'the organization the proxy serves, by id or name (default default)' },
    ],
    examples: [
      { command: 'countersign start', comment: 'the authority at :7070, the proxy at :7080 in front of the demo upstream at :7090' },
      { command: 'countersign start --upstream http://127.0.0.1:3000 --proxy-config my-proxy.yaml', comment: 'the proxy in front of your own application, with your routes' },
    ],
    notes: [
      "The proxy gets its own API key on first start, kept in <data dir>/proxy.key (mode 0600), one per database: after DATABASE_URL changes, that database's key goes to proxy-<time>.key beside it, and each database finds its own again. A key its database revoked stops the start with what to do. The shipped MCP route decides for clients without permits with a second key, <data dir>/mcp-gate.key (scope evaluate:write, for the example policy's agents only), kept the same way.",
      "The routes of --proxy-config decide what needs a permit; the shipped example protects POST /echo/:id and refuses any other path. With --upstream, copy it (config/proxy.yaml in Countersign's folder, such as node_modules/countersign/) and add a route for each consequential endpoint of your application.",
      'Stop with Ctrl-C or SIGTERM (drains in-flight requests); SIGHUP reloads the proxy configuration.',
    ],
  },
  {
    name: 'authority',
    summary: 'run the authority (API on 127.0.0.1:7070, metrics and probes on 127.0.0.1:7071)',
    usage: ['authority [--config FILE]'],
    options: [CONFIG_OPTION],
    examples: [
      { command: 'countersign authority --config config/authority.yaml' },
      { command: 'DATABASE_URL=postgres://countersign@db:5432/countersign REDIS_URL=redis://redis:6379 COUNTERSIGN_SECRET_KEY=$(cat secret.b64) countersign authority', comment: 'on Postgres and Redis' },
    ],
    notes: ['On first start it creates organization "default" and an admin API key, written to <data dir>/bootstrap.json (mode 0600).'],
  },
  {
    name: 'proxy',
    summary: 'run the proxy sidecar (127.0.0.1:7080, metrics and probes on 127.0.0.1:7081)',
    usage: ['proxy [--config FILE]'],
    options: [{ flag: '--config FILE', text: 'the proxy configuration (default config/proxy.yaml); SIGHUP or a change to the file reloads it' }],
    examples: [
      { command: 'COUNTERSIGN_PROXY_UPSTREAM=http://127.0.0.1:3000 countersign proxy --config config/proxy.yaml' },
      { command: 'countersign proxy --config config/proxy-ext-authz.yaml', comment: "the gate as Envoy's external authorizer: gRPC on 127.0.0.1:9191, HTTP on 127.0.0.1:9192" },
    ],
    notes: [
      'A proxy outside `countersign start` needs Redis (redis_url) shared with the authority, and its own API key with scope verify:execute.',
      'With an ext_authz section it also answers Envoy external authorization checks (gRPC and/or HTTP), and with ext_authz.only: true it only does that: Envoy forwards, no upstream is needed (docs/mesh.md).',
    ],
  },
  {
    name: 'migrate',
    summary: 'apply pending database migrations and print their names',
    usage: ['migrate [--config FILE]'],
    options: [CONFIG_OPTION],
    examples: [
      { command: 'countersign migrate', comment: 'prints {"applied": ["0001_foundation", …]}, or {"applied": []} when the schema is up to date' },
      { command: 'DATABASE_URL=postgres://countersign@db:5432/countersign countersign migrate', comment: 'before rolling out a new version on Postgres' },
    ],
    notes: ['The authority also migrates when it starts; replicas starting together apply each migration once.', RUN_BY_SERVER],
    whileRunning: 'The running server applied every pending migration when it started: there is nothing for migrate to do.',
  },
  {
    name: 'orgs create',
    summary: 'create an organization',
    usage: ['orgs create --name NAME [--plan community|team|business|enterprise] [--test] [--config FILE]'],
    options: [
      { flag: '--name NAME', text: 'lowercase letters, digits, ".", "_" and "-", at most 63 (required)' },
      { flag: '--plan PLAN', text: 'community, team, business or enterprise (default community): its rate limits' },
      { flag: '--test', text: 'a test organization: its API keys start with ask_test_' },
      CONFIG_OPTION,
    ],
    examples: [{ command: 'countersign orgs create --name acme --plan business' }],
    notes: [RUN_BY_SERVER],
  },
  {
    name: 'orgs list',
    summary: 'list the organizations',
    usage: ['orgs list [--config FILE]'],
    options: [CONFIG_OPTION],
    examples: [{ command: "countersign orgs list | jq -r '.organizations[] | [.id, .name] | @tsv'" }],
    notes: [RUN_BY_SERVER],
  },
  {
    name: 'keys create',
    summary: 'create an API key and print its secret (shown this once)',
    usage: ['keys create --org ORG --name NAME --scopes SCOPE[,SCOPE…] [--allowed-cidrs CIDR[,CIDR…]] [--actors ACTOR[,ACTOR…]] [--expires-at ISO] [--config FILE]'],
    options: [
      { flag: '--org ORG', text: 'the organization, by id or name (required)' },
      { flag: '--name NAME', text: 'what the key is for (required)' },
      { flag: '--scopes LIST', text: 'comma-separated resource:action scopes, such as evaluate:write,verify:execute (required)' },
      { flag: '--allowed-cidrs LIST', text: 'comma-separated networks the key may be used from (default anywhere)' },
      { flag: '--actors LIST', text: "comma-separated actor ids the key may evaluate as; a trailing * is a prefix, as in 'agent:*' (default any actor)" },
      { flag: '--expires-at ISO', text: 'when the key stops working, ISO 8601 with an offset, in the future (default never)' },
      CONFIG_OPTION,
    ],
    examples: [
      { command: 'countersign keys create --org acme --name ci --scopes evaluate:write,verify:execute', comment: 'a key for an agent that evaluates and a gate that verifies' },
      { command: 'countersign keys create --org acme --name auditor --scopes audit:read --expires-at 2027-12-31T00:00:00Z' },
      { command: "countersign keys create --org acme --name mcp-gate --scopes evaluate:write,verify:execute --actors 'agent:*'", comment: 'a key that may speak only for agents, never for a person' },
    ],
    notes: ['A key made here is its own root identity: it can approve what keys of other roots asked for.', RUN_BY_SERVER],
    whileRunning: `curl -X POST http://{api}/v1/api-keys -H "authorization: Bearer ${BOOTSTRAP_KEY}" -H 'content-type: application/json' -d '{body}'`,
  },
  {
    name: 'keys list',
    summary: "list an organization's API keys (never their secrets)",
    usage: ['keys list --org ORG [--config FILE]'],
    options: [{ flag: '--org ORG', text: 'the organization, by id or name (required)' }, CONFIG_OPTION],
    examples: [{ command: 'countersign keys list --org acme' }],
    notes: [RUN_BY_SERVER],
    whileRunning: `curl http://{api}/v1/api-keys -H "authorization: Bearer ${BOOTSTRAP_KEY}"`,
  },
  {
    name: 'keys revoke',
    summary: 'revoke an API key: it stops working at once',
    usage: ['keys revoke KEY_ID --org ORG [--config FILE]'],
    options: [{ flag: 'KEY_ID', text: 'the key id (from keys list; not the secret)' }, { flag: '--org ORG', text: 'the organization, by id or name (required)' }, CONFIG_OPTION],
    examples: [{ command: 'countersign keys revoke 3f0c9a52-8d1e-4c7b-9a41-2b6f0e7d9c13 --org acme' }],
    notes: [RUN_BY_SERVER],
    whileRunning: `curl -X POST http://{api}/v1/api-keys/{id}/revoke -H "authorization: Bearer ${BOOTSTRAP_KEY}"`,
  },
  {
    name: 'keys rotate-signing',
    summary: 'publish a new permit or audit signing key; it signs from publish_before_use_seconds later',
    usage: ['keys rotate-signing [--purpose permit|audit] [--config FILE]'],
    options: [{ flag: '--purpose PURPOSE', text: 'permit (default) or audit' }, CONFIG_OPTION],
    examples: [
      { command: 'countersign keys rotate-signing --purpose permit' },
      { command: 'COUNTERSIGN_SECRET_KEY=$(cat secret.b64) DATABASE_URL=postgres://countersign@db:5432/countersign countersign keys rotate-signing --purpose audit' },
    ],
    notes: [
      'It first checks that the secret key (COUNTERSIGN_SECRET_KEY, or <data dir>/secret.key) opens the signing keys in use (those signing now or about to; retired keys are not opened); with the wrong secret it changes nothing and exits 1.',
      'The old key stays published until everything it signed has expired; replicas pick the new key up by themselves.',
      `${RUN_BY_SERVER} The server rotates with its own secret key.`,
    ],
  },
  {
    name: 'audit verify',
    summary: "verify an exported audit bundle, with the key its signing_key_id names; exit 1 on any problem",
    usage: ['audit verify BUNDLE (--keys FILE | --authority URL [--api-key KEY] | --key PEM) [--checkpoint FILE [--checkpoint-key PEM]]'],
    options: [
      { flag: 'BUNDLE', text: 'an export from POST /v1/audit/exports (JSON)' },
      { flag: '--keys FILE', text: "the authority's audit key set, as GET /v1/audit/keys answers it (or a JWKS); the key is picked by the bundle's signing_key_id" },
      { flag: '--authority URL', text: 'fetch that key set from the authority at URL (GET URL/v1/audit/keys) instead' },
      { flag: '--api-key KEY', text: 'with --authority: an API key with scope audit:read (default $COUNTERSIGN_API_KEY)' },
      { flag: '--key PEM', text: 'one public key (PEM file) instead of a key set; when the bundle names another key, the report says which' },
      { flag: '--checkpoint FILE', text: 'a signed checkpoint the bundle must agree with; its key is picked by its own signing_key_id' },
      { flag: '--checkpoint-key PEM', text: 'the public key that signed the checkpoint, when it is not in the key set' },
    ],
    examples: [
      {
        command: 'curl -s http://127.0.0.1:7070/v1/audit/keys -H "authorization: Bearer $(jq -r .api_key .countersign/bootstrap.json)" > audit-keys.json',
        comment: 'save the key set once (it keeps every key that signed, also after a rotation)',
      },
      { command: 'countersign audit verify export.json --keys audit-keys.json', comment: 'prints {"ok": true, …}; a modified, removed or reordered event is a problem and exits 1' },
      { command: 'COUNTERSIGN_API_KEY=$(jq -r .api_key .countersign/bootstrap.json) countersign audit verify export.json --authority http://127.0.0.1:7070' },
    ],
    notes: ['Offline except with --authority. Fetching the key set fails with exit 1 (the authority is unreachable, or the API key lacks audit:read).'],
  },
  {
    name: 'policy test',
    summary: 'run the test cases written next to a policy, offline; exit 1 when a case fails',
    usage: ['policy test FILE|DIR… [--junit FILE] [--format text|json]'],
    options: [
      { flag: 'FILE|DIR…', text: 'test files (*.tests.yaml), or directories searched for them; each names the policy it tests and cases: input facts → expected decision, reasons, risk bounds' },
      { flag: '--junit FILE', text: 'also write the results as JUnit XML, for CI (missing folders are created)' },
      { flag: '--format FORMAT', text: 'text (default) or json' },
    ],
    examples: [
      { command: 'countersign policy test config/policies/default.tests.yaml --junit reports/policy.xml' },
      { command: 'countersign policy test config/policies --format json', comment: 'every *.tests.yaml under the directory' },
    ],
    notes: ['Needs no database and no running server. Exit 2 when a test file is invalid or its policy does not compile.'],
  },
  {
    name: 'policy replay',
    summary: 're-decide the evaluations recorded in the audit log under a candidate policy; exit 1 when decisions change',
    usage: ['policy replay --policy FILE [--since DURATION] [--org ORG] [--limit N] [--config FILE] [--format text|json]'],
    options: [
      { flag: '--policy FILE', text: 'the candidate policy (required)' },
      { flag: '--since DURATION', text: 'how far back: 30m, 24h, 7d, or an ISO timestamp (default 24h)' },
      { flag: '--org ORG', text: 'the organization the candidate is for, by id or name; required when the database holds more than one' },
      { flag: '--limit N', text: 'replay at most N evaluations (default 10000)' },
      CONFIG_OPTION,
      { flag: '--format FORMAT', text: 'text (default) or json' },
    ],
    examples: [
      { command: 'countersign policy replay --policy candidate.yaml --since 24h', comment: 'every decision that would change, by action class; exit 0 when none does, 1 when some do' },
      { command: 'DATABASE_URL=postgres://countersign@db:5432/countersign countersign policy replay --policy candidate.yaml --since 7d --org acme --format json' },
    ],
    notes: ['Reads the database and writes nothing. Exit 2 when the candidate policy does not compile.'],
  },
];

/** The word after `countersign` for each command, first appearance order: start, authority, …, keys, audit, policy. */
export function topLevelNames(): string[] {
  return [...new Set(COMMANDS.map((entry) => entry.name.split(' ')[0] as string))];
}

/** The subcommands of a group (`keys` → create, list, revoke, rotate-signing); empty for a plain command. */
export function subcommandsOf(group: string): CommandEntry[] {
  return COMMANDS.filter((entry) => entry.name.startsWith(`${group} `));
}

export function findCommand(name: string): CommandEntry | undefined {
  return COMMANDS.find((entry) => entry.name === name);
}
