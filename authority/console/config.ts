/**
 * The `console` section of authority.yaml (docs/console.md).
 *
 * @example
 *   console:
 *     public_url: https://countersign.example.com
 *     oidc: { client_id: countersign-console, scopes: [openid, email, profile] }
 *     session_minutes: 480
 */
import { z } from 'zod';

export const ConsoleConfig = z
  .object({
    /** Serve the console at /console. */
    enabled: z.boolean().default(true),
    /**
     * Where people open the authority, without /console (https://countersign.example.com): the
     * identity provider sends them back to <public_url>/console/sign-in/callback, and the AuthZEN
     * discovery document names its endpoints under it. Unset: each request's own scheme and Host
     * (behind a proxy, set trust_proxy).
     */
    public_url: z.url().optional(),
    /**
     * Sign-in with the identity provider of auth.jwt (its issuer), authorization code flow with
     * PKCE. The client secret, when the client has one, comes from COUNTERSIGN_CONSOLE_CLIENT_SECRET
     * or `client_secret_file`, never from this file.
     */
    oidc: z
      .object({
        client_id: z.string().min(1),
        client_secret_file: z.string().min(1).optional(),
        /** What to ask for so the ID token carries auth.jwt.claims (user, organization, role, email). */
        scopes: z.array(z.string().min(1)).min(1).default(['openid', 'email', 'profile']),
      })
      .strict()
      .optional(),
    /**
     * Sign-in with an API key: for the embedded development setup (config/authority.yaml turns it
     * on). The console labels such a session as a development sign-in.
     */
    api_key_sign_in: z.boolean().default(false),
    /** How long a console session lasts. */
    session_minutes: z.number().int().min(5).max(7 * 24 * 60).default(480),
  })
  .strict();
export type ConsoleConfig = z.infer<typeof ConsoleConfig>;

export const CONSOLE_DEFAULTS: z.input<typeof ConsoleConfig> = { enabled: true, api_key_sign_in: false, session_minutes: 480 };

