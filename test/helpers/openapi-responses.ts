/**
 * Checks answers against the OpenAPI document: finds the operation of a request (its canonical
 * path or one of its `x-aliases`, with path parameters), the response of its status, and
 * validates the JSON body with the response's schema (JSON Schema 2020-12, ajv).
 *
 * @example
 *   const responses = new OpenApiResponses(openApiDocument(app));
 *   const problems = responses.check({ method: 'GET', url: '/v1/permits/p_1?x=1', status: 200, body });
 *   // [] when the answer is one the document describes
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import FindMyWay, { type HTTPVersion } from 'find-my-way';
import { ROUTER_MAX_PARAM_LENGTH } from '../../authority/http/bounded-input.js';

type Json = Record<string, unknown>;

export interface Answer {
  method: string;
  /** The request URL as sent (query string allowed). */
  url: string;
  status: number;
  /** The parsed JSON body, or the raw text when it is not JSON. */
  body: unknown;
}

export interface Located {
  /** The document path, such as `/v1/permits/{id}`. */
  path: string;
  method: string;
  operation: Json;
}

const DATE_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)$/i;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export class OpenApiResponses {
  // As long a path segment as the authority's router takes: a permit token in a permit route's path.
  private readonly router = FindMyWay<HTTPVersion.V1>({ ignoreTrailingSlash: false, maxParamLength: ROUTER_MAX_PARAM_LENGTH });
  private readonly ajv: Ajv2020;
  private readonly validators = new Map<string, ValidateFunction>();
  /** `METHOD path` of each operation that answered with a documented 2xx. */
  readonly succeeded = new Set<string>();

  constructor(readonly document: Json) {
    this.ajv = new Ajv2020({ strict: false, allErrors: true, logger: false });
    this.ajv.addFormat('date-time', DATE_TIME);
    this.ajv.addFormat('uuid', UUID);
    this.ajv.addFormat('email', /^[^\s@]+@[^\s@]+$/);
    this.ajv.addFormat('uri', { validate: (value: string) => URL.canParse(value) });
    const paths = (document.paths ?? {}) as Record<string, Record<string, Json>>;
    for (const [path, item] of Object.entries(paths)) {
      for (const [method, operation] of Object.entries(item)) {
        const located: Located = { path, method: method.toUpperCase(), operation };
        const aliases = (operation['x-aliases'] as string[] | undefined) ?? [];
        for (const url of [path, ...aliases]) {
          this.router.on(method.toUpperCase() as never, url.replace(/\{([^}]+)\}/g, ':$1'), () => undefined, located);
        }
      }
    }
  }

  /** The operation serving `method url`, or null when the document has none. */
  locate(method: string, url: string): Located | null {
    const found = this.router.find(method.toUpperCase() as never, url.split('?')[0] as string);
    return found ? (found.store as Located) : null;
  }

  /** The problems with an answer; empty when the document describes it. */
  check(answer: Answer): string[] {
    const where = `${answer.method} ${answer.url} → ${answer.status}`;
    const located = this.locate(answer.method, answer.url);
    if (!located) return [`${where}: no operation in the document`];
    const responses = (located.operation.responses ?? {}) as Record<string, Json>;
    let response = responses[String(answer.status)];
    if (!response) return [`${where}: status ${answer.status} is not documented for ${located.method} ${located.path}`];
    response = this.resolve(response);
    const content = response.content as Record<string, { schema?: Json }> | undefined;
    const schema = content?.['application/json']?.schema;
    if (!schema && content?.['text/event-stream'] !== undefined && typeof answer.body === 'string') {
      // A stream of events is text; the tests that read it check its events.
      if (answer.status >= 200 && answer.status < 300) this.succeeded.add(`${located.method} ${located.path}`);
      return [];
    }
    if (!schema) return [`${where}: the documented response has no JSON schema`];
    const validate = this.validator(`${located.method} ${located.path} ${answer.status}`, schema);
    if (!validate(answer.body)) {
      return [`${where}: body does not match ${located.method} ${located.path} ${answer.status}: ${this.ajv.errorsText(validate.errors, { separator: '; ' })}`];
    }
    if (answer.status >= 200 && answer.status < 300) this.succeeded.add(`${located.method} ${located.path}`);
    return [];
  }

  /** Every operation of the document, as `METHOD path`. */
  operations(): string[] {
    const paths = (this.document.paths ?? {}) as Record<string, Record<string, Json>>;
    return Object.entries(paths).flatMap(([path, item]) => Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`));
  }

  private resolve(response: Json): Json {
    const ref = response.$ref;
    if (typeof ref !== 'string') return response;
    const name = ref.replace('#/components/responses/', '');
    const components = this.document.components as { responses?: Record<string, Json> };
    return components.responses?.[name] ?? response;
  }

  /** The schema compiled with the document's components beside it, so its `#/components/…` refs resolve. */
  private validator(key: string, schema: Json): ValidateFunction {
    let validate = this.validators.get(key);
    if (!validate) {
      validate = this.ajv.compile({ ...schema, $id: `urn:countersign:response:${this.validators.size}`, components: this.document.components });
      this.validators.set(key, validate);
    }
    return validate;
  }
}
