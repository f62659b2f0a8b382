-- Organizations and their API keys: the identity half of the chain.

CREATE TABLE organizations (
  id          uuid PRIMARY KEY,
  name        text NOT NULL UNIQUE,
  plan        text NOT NULL DEFAULT 'community'
              CHECK (plan IN ('community', 'team', 'business', 'enterprise')),
  -- Test organizations get ask_test_ keys; live ones ask_live_.
  is_test     boolean NOT NULL DEFAULT false,
  created_at  timestamptz NOT NULL
);

CREATE TABLE api_keys (
  id              uuid PRIMARY KEY,
  org_id          uuid NOT NULL REFERENCES organizations (id),
  name            text NOT NULL,
  -- hex SHA-256 of the whole secret; the secret itself is never stored.
  key_hash        text NOT NULL UNIQUE,
  -- The first characters of the secret (ask_live_AbCd), to recognise a key in listings.
  display_prefix  text NOT NULL,
  scopes          text[] NOT NULL,
  -- NULL: usable from anywhere.
  allowed_cidrs   text[],
  created_by      text NOT NULL,
  created_at      timestamptz NOT NULL,
  last_used_at    timestamptz,
  expires_at      timestamptz,
  revoked_at      timestamptz
);

CREATE INDEX api_keys_by_org ON api_keys (org_id, created_at);
