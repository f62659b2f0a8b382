/**
 * pino JSON logs for both processes. Credentials never reach a log line: the headers that carry
 * them and any field named like a secret are redacted wherever they appear.
 *
 * @example
 *   const logger = createLogger({ name: 'authority', level: 'info' });
 *   logger.info({ api_key: 'ask_live_…' }, 'x'); // api_key is written as "[redacted]"
 *   // Components sharing one destination: an unnamed root, each child naming its lines once.
 *   const root = createLogger({ level: 'info' });
 *   root.child({ name: 'proxy' }).info('x'); // {"level":"info",…,"name":"proxy","msg":"x"}
 */
import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers["x-service-key"]',
  'req.headers["x-service-permit"]',
  'req.headers.cookie',
  'headers.authorization',
  'headers["x-service-key"]',
  'headers["x-service-permit"]',
  'api_key',
  'secret',
  'token',
  'password',
  'permit_token',
  'signing_secret',
  '*.api_key',
  '*.secret',
  '*.token',
  '*.password',
  '*.permit_token',
  '*.signing_secret',
];

export interface LoggerSettings {
  /**
   * The `name` of every line. Leave it out for a logger whose children name themselves: pino
   * writes a child's `name` binding beside its parent's rather than instead of it, so a named
   * parent's child would carry `name` twice on every line.
   */
  name?: string;
  level: string;
  /** Where lines go; stdout when absent (tests pass a stream to read them). */
  destination?: DestinationStream;
}

export function loggerOptions(settings: Pick<LoggerSettings, 'name' | 'level'>): LoggerOptions {
  return {
    ...(settings.name === undefined ? {} : { name: settings.name }),
    level: settings.level,
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  };
}

export function createLogger(settings: LoggerSettings): Logger {
  return settings.destination ? pino(loggerOptions(settings), settings.destination) : pino(loggerOptions(settings));
}
