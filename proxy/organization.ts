/**
 * The example config/proxy.yaml names no real organization, only a placeholder. A gate serving
 * the placeholder would refuse every permit (ORG_MISMATCH) while looking healthy, so the proxy
 * refuses to start, and a reload refuses to apply, with it. It is checked where the proxy starts
 * and reloads rather than in the schema: `countersign start` validates the same file before it
 * knows the organization's id, which it then passes in COUNTERSIGN_PROXY_ORGANIZATION.
 *
 * @example
 *   const config = requireOrganization(await loadProxyConfig(file, env), file);
 *   // ProxyConfigError (PROXY_CONFIG_INVALID): config/proxy.yaml is invalid: organization: …
 */
import { ProxyConfigError, type ProxyConfig } from './config.js';

/** The value config/proxy.yaml ships with. */
export const PLACEHOLDER_ORGANIZATION = 'replace-with-your-organization-id';

/** `config` unchanged, or ProxyConfigError when its organization is still the placeholder. */
export function requireOrganization(config: ProxyConfig, source: string): ProxyConfig {
  if (config.organization.trim().toLowerCase() !== PLACEHOLDER_ORGANIZATION) return config;
  throw new ProxyConfigError(
    `${source} is invalid:\n  organization: still the placeholder "${PLACEHOLDER_ORGANIZATION}": set organization (or ` +
      'COUNTERSIGN_PROXY_ORGANIZATION) to the id of the organization this gate serves: organization_id in the ' +
      "answer of GET /v1/api-key-self for that organization's keys, or in the embedded authority's bootstrap.json",
  );
}
