/**
 * The gate's two modes, in their own module so that every part of the proxy's configuration (the
 * HTTP routes in config.ts, the MCP routes in mcp/config.ts) names them from one place.
 *
 * @example
 *   z.enum(PROXY_MODES).optional(); // a route's `mode:`
 */
export const PROXY_MODES = ['enforce', 'shadow'] as const;
export type ProxyMode = (typeof PROXY_MODES)[number];
