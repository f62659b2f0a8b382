/**
 * A real webhook receiver on loopback for tests: records every request's raw bytes and headers,
 * and answers as told (`mode`): 204, 500, hang (never answer, until closed) or anything custom.
 * `next()` resolves when the next request has arrived, so tests wait for events, never for time.
 *
 * @example
 *   const receiver = await startReceiver();
 *   t.teardown(() => receiver.close());
 *   receiver.mode = 'fail';
 *   await worker.runOnce();
 *   receiver.received[0].raw; // Buffer, exactly as sent
 */
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { closeServer, listen } from './loopback.js';

export interface ReceivedRequest {
  raw: Buffer;
  headers: IncomingHttpHeaders;
  json: Record<string, unknown> & { delivery_id: string; event_type: string; attempt: number; payload: Record<string, unknown> };
}

export type ReceiverMode = 'ok' | 'fail' | 'hang' | 'redirect';

export interface Receiver {
  url: string;
  mode: ReceiverMode;
  received: ReceivedRequest[];
  /** Resolves with the next request to arrive (already arrived ones do not count). */
  next(): Promise<ReceivedRequest>;
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const waiting: Array<(request: ReceivedRequest) => void> = [];
  const hanging: ServerResponse[] = [];
  const receiver: Receiver = {
    url: '',
    mode: 'ok',
    received: [],
    next: () => new Promise((resolve) => waiting.push(resolve)),
    close: async () => {
      for (const response of hanging) response.destroy();
      await closeServer(server);
    },
  };
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const raw = Buffer.concat(chunks);
      const entry: ReceivedRequest = { raw, headers: request.headers, json: JSON.parse(raw.toString('utf8')) };
      receiver.received.push(entry);
      for (const resolve of waiting.splice(0)) resolve(entry);
      switch (receiver.mode) {
        case 'ok':
          response.writeHead(204).end();
          break;
        case 'fail':
          response.writeHead(500, { 'content-type': 'text/plain' }).end(`receiver is down ${'x'.repeat(5000)}`);
          break;
        case 'redirect':
          response.writeHead(302, { location: `${receiver.url}/elsewhere` }).end();
          break;
        case 'hang':
          hanging.push(response);
          break;
      }
    });
  });
  receiver.url = `${await listen(server)}/hooks`;
  return receiver;
}
