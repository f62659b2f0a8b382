-- Change notices for the authority's credential cache (authority/auth/credential-cache.ts).
--
-- Every authority process caches API keys and organizations (with their current policy version)
-- so that authenticating a request needs no query. A change to either table, by any path (the
-- API, the CLI, another replica, an operator's SQL), sends a notice on the channel
-- `countersign_credentials` at commit; each process listening there empties its cache.
-- `last_used_at` is written as keys are used and changes nothing the cache decides on, so it
-- alone sends no notice.

CREATE FUNCTION countersign_credentials_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- Notices with the same payload in one transaction are delivered once.
  PERFORM pg_notify('countersign_credentials', TG_TABLE_NAME);
  RETURN NULL;
END;
$$;

CREATE TRIGGER api_keys_changed
  AFTER UPDATE ON api_keys
  FOR EACH ROW
  WHEN ((to_jsonb(OLD) - 'last_used_at') IS DISTINCT FROM (to_jsonb(NEW) - 'last_used_at'))
  EXECUTE FUNCTION countersign_credentials_changed();
CREATE TRIGGER api_keys_removed
  AFTER DELETE OR TRUNCATE ON api_keys
  FOR EACH STATEMENT EXECUTE FUNCTION countersign_credentials_changed();

CREATE TRIGGER organizations_changed
  AFTER UPDATE OR DELETE OR TRUNCATE ON organizations
  FOR EACH STATEMENT EXECUTE FUNCTION countersign_credentials_changed();
