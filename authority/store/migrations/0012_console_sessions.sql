-- Console sessions (docs/console.md): the browser holds a random token in an HttpOnly cookie; the
-- server keeps only its SHA-256, what the person signed in as, and when the session ends.
--
-- A session signed in through the identity provider carries the ID token's user, email and role
-- as they were at sign-in (the console's answer to "who is this"), for at most the session's
-- lifetime. A development session signed in with an API key carries the key's id only: the key is
-- looked up on every request, so revoking or expiring it ends the session at once.
CREATE TABLE console_sessions (
  token_hash text PRIMARY KEY,
  org_id uuid NOT NULL REFERENCES organizations (id),
  method text NOT NULL CHECK (method IN ('oidc', 'api_key')),
  user_id text,
  email text,
  role text,
  api_key_id uuid REFERENCES api_keys (id),
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  CHECK ((method = 'oidc' AND user_id IS NOT NULL AND api_key_id IS NULL)
      OR (method = 'api_key' AND api_key_id IS NOT NULL AND user_id IS NULL))
);
CREATE INDEX console_sessions_expires_at ON console_sessions (expires_at);
