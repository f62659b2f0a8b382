/**
 * Keeps docs/api.md in step with the OpenAPI document the authority serves: the committed file
 * must equal the reference rendered from it (test/docs/api-reference.ts). With UPDATE_API_DOC=1
 * (`npm run docs:api`) the test writes docs/api.md instead of comparing it.
 */
import t from 'tap';
import { openApiDocument } from '../../authority/openapi/document.js';
import { createTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { REGENERATE_API_COMMAND, renderApiReference } from './api-reference.js';
import { checkGeneratedPage } from './generated-page.js';


t.test('docs/api.md is the reference rendered from the OpenAPI document', async (t) => {
  const opened = await appBackends()[0]!.open();
  const authority = await createTestAuthority(opened);
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  const document = openApiDocument(authority.app) as Record<string, any>;
  const rendered = renderApiReference(document);
  checkGeneratedPage(t, { file: 'docs/api.md', rendered, updateVariable: 'UPDATE_API_DOC', regenerate: REGENERATE_API_COMMAND, source: 'the OpenAPI document' });

  t.test('the reference covers every operation and the error catalogue', async (t) => {
    for (const [path, item] of Object.entries(document.paths as Record<string, Record<string, any>>)) {
      for (const [method, operation] of Object.entries(item)) {
        t.match(rendered, `### ${operation.summary}\n\n\`${method.toUpperCase()} ${path}\``, `${method.toUpperCase()} ${path} has its section`);
      }
    }
    for (const code of ['invalid_request', 'unauthorized', 'forbidden', 'not_found', 'conflict', 'payload_too_large', 'unsupported_media_type', 'rate_limited', 'service_unavailable']) {
      t.match(rendered, `| \`${code}\` |`, `the catalogue lists ${code}`);
    }
    t.match(rendered, '| `POST /v1/verify-permit` | `/v1-verify-permit`, `/functions/v1/v1-verify-permit` |', 'the alias table');
    for (const example of ['/v1/evaluate -H', '/access/v1/evaluation -H', '/v1/verify-permit -H', '/resolve -H', '/v1/api-keys -H', '/v1/audit/exports -H']) {
      t.match(rendered, example, `a curl example calls ${example.split(' ')[0]}`);
    }
  });
});
