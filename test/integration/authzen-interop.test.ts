/**
 * The AuthZEN working group's interoperability scenarios and the Authorization API 1.0
 * certification levels, over real loopback HTTP against a policy written for them
 * (test/fixtures/authzen/interop-policy.yaml). The vectors are data (test/fixtures/authzen/):
 *
 *   todo.json         the Todo scenario: 40 evaluations and 3 batches (`"resource": {}` defaults)
 *   api-gateway.json  the API gateway scenario: 25 evaluations with HTTP methods as action names
 *   certification.json  Basic, Batch and Search (Core and Properties) cases: status, decision,
 *                     batch answers and search results
 *
 * They are compared as the working group's runner compares them: an evaluation by its `decision`,
 * a batch by its `evaluations` array, byte for byte (so entries carry no context unless asked).
 * Every answer is also checked against the OpenAPI document.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { loopbackApi } from '../helpers/loopback-api.js';
import { repoPath } from '../helpers/repo.js';

interface Vector {
  request: unknown;
  expected: unknown;
}

interface CertificationCase {
  level: string;
  name: string;
  endpoint: string;
  status: number;
  request?: unknown;
  raw?: string;
  content_type?: string;
  decision?: boolean;
  evaluations?: unknown[];
  evaluations_length?: number;
  results_include?: unknown[];
  results?: unknown[];
}

const fixture = (name: string): any => JSON.parse(readFileSync(repoPath('test', 'fixtures', 'authzen', name), 'utf8'));
const todo = fixture('todo.json') as { evaluation: Vector[]; evaluations: Vector[] };
const gateway = fixture('api-gateway.json') as { evaluation: Vector[] };
const certification = (fixture('certification.json') as { cases: CertificationCase[] }).cases;
const policySource = readFileSync(repoPath('test', 'fixtures', 'authzen', 'interop-policy.yaml'), 'utf8');

for (const backend of appBackends()) {
  t.test(`the working group's scenarios and the certification levels, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { base, call, problems } = await loopbackApi(authority);
      t.equal((await call('PUT', '/v1/policies', { body: { source: policySource, format: 'yaml' } })).status, 200, 'the scenario policy is loaded');

      // As the runner: `data.decision || false` against the expected boolean; `data.evaluations` byte for byte.
      const run = async (scenario: string, vectors: Vector[], endpoint: 'evaluation' | 'evaluations') => {
        let passed = 0;
        for (const [index, vector] of vectors.entries()) {
          const reply = await call('POST', `/access/v1/${endpoint}`, { body: vector.request });
          const answer = endpoint === 'evaluation' ? reply.body.decision || false : reply.body.evaluations || [];
          if (JSON.stringify(answer) === JSON.stringify(vector.expected)) passed++;
          else t.fail(`${scenario} ${endpoint} #${index}: ${reply.status} ${reply.text} for ${JSON.stringify(vector.request)}`);
        }
        t.equal(passed, vectors.length, `${scenario}: ${passed}/${vectors.length} ${endpoint}`);
      };
      await run('Todo', todo.evaluation, 'evaluation');
      await run('Todo', todo.evaluations, 'evaluations');
      await run('API gateway', gateway.evaluation, 'evaluation');

      for (const check of certification) {
        const what = `${check.level}: ${check.name}`;
        const reply = await call('POST', `/access/v1/${check.endpoint}`, {
          requestId: `cert-${check.name.replace(/[^a-z0-9]+/gi, '-')}`,
          ...(check.raw === undefined ? { body: check.request } : { raw: check.raw, contentType: check.content_type }),
        });
        t.equal(reply.status, check.status, `${what}: ${check.status}`);
        t.equal(reply.headers.get('x-request-id'), `cert-${check.name.replace(/[^a-z0-9]+/gi, '-')}`, `${what}: X-Request-ID echoed`);
        t.match(reply.headers.get('content-type'), /^application\/json/, `${what}: JSON`);
        if (check.status !== 200) {
          t.equal(reply.body.error, 'invalid_request', `${what}: invalid_request`);
          continue;
        }
        if (check.decision !== undefined) t.equal(reply.body.decision, check.decision, `${what}: decision ${check.decision}`);
        if (check.evaluations !== undefined) t.same(reply.body, { evaluations: check.evaluations }, `${what}: the exact answer`);
        if (check.evaluations_length !== undefined) {
          t.equal(reply.body.evaluations.length, check.evaluations_length, `${what}: as many answers as entries`);
          t.ok(reply.body.evaluations.every((entry: { decision: unknown }) => typeof entry.decision === 'boolean'), `${what}: each a boolean decision`);
        }
        if (check.results_include !== undefined) {
          for (const expected of check.results_include) t.same(reply.body.results.filter((found: unknown) => JSON.stringify(found) === JSON.stringify(expected)).length, 1, `${what}: ${JSON.stringify(expected)} found`);
        }
        if (check.results !== undefined) t.same(reply.body.results, check.results, `${what}: exactly these results`);
        if (check.endpoint.startsWith('search/')) t.type(reply.body.page?.next_token, 'string', `${what}: a page with next_token`);
      }

      // Idempotency: the same question asked again has the same answer.
      const same = [];
      for (let i = 0; i < 3; i++) same.push((await call('POST', '/access/v1/evaluation', { body: certification[0]!.request })).body.decision);
      t.same(same, [true, true, true], 'the same decision each time');

      // Discovery: the metadata names every endpoint offered, and each answers.
      const metadata = (await call('GET', '/.well-known/authzen-configuration', { token: null })).body;
      t.equal(metadata.policy_decision_point, base);
      for (const key of ['access_evaluation_endpoint', 'access_evaluations_endpoint', 'search_subject_endpoint', 'search_action_endpoint']) {
        t.ok(metadata[key].startsWith(base), `${key} is advertised`);
      }
      t.notOk('search_resource_endpoint' in metadata, 'resource search is not advertised');

      t.same(problems, [], 'every answer matches the OpenAPI document');
    }),
  );
}
