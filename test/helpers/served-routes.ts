/**
 * Every route a fastify app serves, as `METHOD /path`, read from its route tree. The HEAD routes
 * fastify adds for each GET are left out: HEAD answers what GET answers, without a body.
 *
 * @example
 *   servedRoutes(authority.app); // ['GET /healthz', 'POST /v1/evaluate', …]
 */
import type { FastifyInstance } from 'fastify';

export function servedRoutes(app: FastifyInstance): string[] {
  const parents: string[] = [];
  const served: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const match = /^(.*?)(?:├── |└── )(\S+) \(([A-Z, ]+)\)/.exec(line);
    if (!match) continue;
    const depth = (match[1] as string).length / 4;
    const parent = parents[depth - 1] ?? '';
    // find-my-way prints the wildcard of `/console/*` as a child `*` of `/console`: the slash is
    // its static prefix's, left out of the picture. No route here ends in a bare `*`.
    const segment = match[2] === '*' && !parent.endsWith('/') ? '/*' : (match[2] as string);
    const path = parent + segment;
    parents[depth] = path;
    for (const method of (match[3] as string).split(', ')) if (method !== 'HEAD') served.push(`${method} ${path}`);
  }
  return served.sort();
}
