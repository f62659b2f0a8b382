import { MAX_AUTHZEN_EVALUATIONS } from '../../shared/wire/authzen.js';
import { ACTOR_FORBIDDEN } from './components.js';

/**
 * The OpenAPI prose of the AuthZEN 1.0 facade: evaluation, batches, subject and action search, and
 * the discovery document. Kept apart from operations.ts, which spreads them into OPERATIONS in
 * this place, so each file stays readable.
 *
 * @example
 *   AUTHZEN_OPERATIONS['POST /access/v1/evaluation'].operationId; // 'accessEvaluation'
 */
export const AUTHZEN_OPERATIONS = {
  'POST /access/v1/evaluation': {
    operationId: 'accessEvaluation',
    summary: 'AuthZEN access evaluation',
    tag: 'AuthZEN',
    description:
      'One AuthZEN 1.0 access evaluation (`subject`, `action`, `resource`, optional `context`), decided and recorded like `POST /v1/evaluate`, and answered `{decision, context}`. No permit is issued, whatever the decision.',
    success: 'The decision: `true` only for allow; Countersign\'s decision, reasons and what it opened in `context`.',
    errors: { 403: ACTOR_FORBIDDEN, 409: 'Another credential asked this very question under this `X-Request-ID`.' },
    notJsonIs400: true,
  },
  'POST /access/v1/evaluations': {
    operationId: 'accessEvaluations',
    summary: 'AuthZEN access evaluations (batch)',
    tag: 'AuthZEN',
    description: [
      `Several AuthZEN 1.0 evaluations in one request, at most ${MAX_AUTHZEN_EVALUATIONS} (more is 400). The top-level \`subject\`, \`action\`, \`resource\` and \`context\` are defaults and may be partial (\`"resource": {}\`): an entry's own entity replaces the default as a whole (its \`properties\` too), except that a required field it leaves out (\`type\`, \`id\`, \`name\`) comes from the default; an entry's own \`context\` replaces the default context. Without \`evaluations\`, or with an empty list, the request is one evaluation of the top-level keys (which must then be complete) and is answered \`{decision, context}\`.`,
      '',
      'Entries are decided one at a time, in order, and answered in that order. `options.evaluations_semantic`: `execute_all` (the default) decides every entry; `deny_on_first_deny` stops after the first `false`; `permit_on_first_permit` stops after the first `true`. Entries after the stop are neither decided nor recorded, and the answer lists only those decided. A decided entry is `{decision}` alone unless `options.include_context` is `true`, which adds each one\'s `context`. Other options are ignored.',
      '',
      'A batch of N entries draws N tokens from the `evaluate` bucket (one per decision, as on evaluate) before the first is decided; when the bucket cannot cover them, the answer is 429 `unavailable` and nothing is decided. An entry that is incomplete or malformed, or that cannot be decided for a reason of its own (its request id already used for other facts, its subject an actor the API key may not speak for), is `false` with `context.error` (`status`, `code`, `message`, `details`), and the others are decided; a failure of the service (503) fails the whole request, and entries decided before it stay recorded.',
    ].join('\n'),
    success: 'The decision of each entry in order, or one decision when the request listed no entries.',
    errors: { 403: ACTOR_FORBIDDEN, 409: 'Without entries: another credential asked this very question under this `X-Request-ID`.' },
    notJsonIs400: true,
  },
  'POST /access/v1/search/subject': {
    operationId: 'searchSubjects',
    summary: 'AuthZEN subject search',
    tag: 'AuthZEN',
    description:
      'The subjects of the requested `subject.type` that may perform `action` on `resource`: every actor the policy names (in a class or an actor group), with the requested type and properties, put through the policy as an evaluation of it would be; those decided `allow` are the results. Actors a class admits through `actors: [\'*\']` cannot be enumerated and are not listed; for an API key with `allowed_actors`, only the actors it may speak for are. Nothing is decided or recorded (no audit event, no approval opened, presented approvals not consulted); one token from the `evaluate` bucket. Paged: `page.limit` (1–100, 100 by default) and `page.token` (the previous page\'s `next_token`).',
    success: 'The subjects found, and the page: `next_token` (empty on the last page), `count`, `total`.',
    notJsonIs400: true,
  },
  'POST /access/v1/search/action': {
    operationId: 'searchActions',
    summary: 'AuthZEN action search',
    tag: 'AuthZEN',
    description:
      'The actions `subject` may perform on `resource` (an agent gateway listing a caller\'s tools, say): the action types of the policy\'s exact classes, the names of `authzen.action_names` and the HTTP methods, each put through the policy as an evaluation of it would be; those decided `allow` are the results, under their AuthZEN names. A type a class reaches only through `prefix.*` is listed only when one of those names maps onto it. Nothing is decided or recorded (no audit event, no approval opened, presented approvals not consulted); one token from the `evaluate` bucket. Paged like subject search.',
    success: 'The actions found, and the page: `next_token` (empty on the last page), `count`, `total`.',
    errors: { 403: ACTOR_FORBIDDEN },
    notJsonIs400: true,
  },
  'GET /.well-known/authzen-configuration': {
    operationId: 'getAuthzenConfiguration',
    summary: 'AuthZEN metadata (discovery)',
    tag: 'AuthZEN',
    description:
      'The AuthZEN Policy Decision Point metadata: `policy_decision_point` and the absolute URLs of the evaluation and search endpoints (resource search is not offered, so not listed). Built from `console.public_url` when configured, else from the request\'s scheme and Host (the forwarded ones with `trust_proxy`). It holds no secrets and, like `/openapi.json`, needs no credential: a client discovers the endpoints before it holds one.',
    success: 'The metadata document.',
    successHeaders: { 'Cache-Control': '`public, max-age=3600` with `console.public_url` configured; `no-store` when the URLs come from the request.' },
  },
} as const;
