/**
 * `POST /admin/commands` on the authority's admin listener, served only while the authority runs
 * on the embedded database: the administration commands (`keys create`, `orgs list`, …) that
 * cannot open the database while this process holds it are sent here by the CLI instead, and run
 * by the same code on this process's connection (authority/cli/admin-operations.ts).
 *
 * Only from this machine (a loopback peer) and only with the token of `<data dir>/admin-channel.json`
 * (channel.ts), compared in constant time; anything else is refused before the body is looked at.
 * Answers `{output}` as the command prints it; a usage error (a missing option, an unknown
 * organization) is a 400 `invalid_request` with the command's message, and a failure a 500 that
 * says what failed. Neither the input nor the output is logged: a created key's secret is in it.
 *
 * @example
 *   POST /admin/commands  Authorization: Bearer <token>
 *   { "command": "keys list", "input": { "org": "default" } }
 *   → 200 { "output": { "api_keys": [ … ] } }
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import ipaddr from 'ipaddr.js';
import { z } from 'zod';
import { CountersignError } from '../../shared/errors.js';
import { UsageError } from '../../shared/usage-error.js';
import { isAdminCommand, parseAdminInput, runAdminOperation, type AdminContext } from '../cli/admin-operations.js';
import { invalidRequest } from '../http/errors.js';
import { CHANNEL_PATH, tokenMatches } from './channel.js';

const CommandRequest = z.object({ command: z.string().max(64), input: z.record(z.string(), z.unknown()) }).strict();

function isLoopback(address: string | undefined): boolean {
  if (address === undefined || !ipaddr.isValid(address)) return false;
  return ipaddr.process(address).range() === 'loopback';
}

function checkCaller(request: FastifyRequest, token: string): void {
  if (!isLoopback(request.socket.remoteAddress)) throw new CountersignError('forbidden', 'the admin channel takes commands from this machine only');
  const header = request.headers.authorization;
  const presented = header?.startsWith('Bearer ') ? header.slice('Bearer '.length) : '';
  if (!tokenMatches(presented, token)) throw new CountersignError('unauthorized', 'the admin channel needs the token of the admin-channel.json in the data directory');
}

export function adminChannelRoutes(app: FastifyInstance, { token, context }: { token: string; context: AdminContext }): void {
  app.post(CHANNEL_PATH, { onRequest: async (request) => checkCaller(request, token) }, async (request) => {
    const body = CommandRequest.safeParse(request.body);
    if (!body.success) throw invalidRequest(body.error);
    const { command, input } = body.data;
    if (!isAdminCommand(command)) throw new CountersignError('invalid_request', `unknown command: ${command}`);
    try {
      const output = await runAdminOperation(command, parseAdminInput(command, input), context);
      request.log.info({ command }, 'admin command run for the CLI');
      return { output };
    } catch (error) {
      if (error instanceof UsageError) throw new CountersignError('invalid_request', error.message);
      if (error instanceof CountersignError) throw error;
      request.log.warn({ command, err: error }, 'admin command failed');
      throw new CountersignError('internal', `${command} failed: ${(error as Error).message}`, { cause: error });
    }
  });
}
