-- The documents written on every evaluation (the stored response, the audit payload) are
-- compressed with lz4 instead of the default pglz when their row goes over the TOAST threshold
-- (about 2 kB), as an evaluation's row with its response does: lz4 compresses several times
-- faster, and pglz was a measurable part of Postgres's CPU per evaluation (docs/architecture.md,
-- "The evaluation's write in Postgres").
-- The setting applies to values written from now on; values already stored stay as they are and
-- read the same.
--
-- Postgres 14 and later built with lz4 (the Debian, Ubuntu and official container builds are)
-- take it. A server without it (PGlite, a build without lz4, Postgres 13 and older, which have no
-- SET COMPRESSION) keeps pglz: the statements run through EXECUTE, so they are parsed only on a
-- server that knows them, and lz4 missing from the build is caught. The migration applies
-- everywhere.
DO $$
BEGIN
  IF current_setting('server_version_num')::integer < 140000 THEN
    RAISE NOTICE 'Postgres before 14 has no column compression setting; the default compression stays';
    RETURN;
  END IF;
  EXECUTE 'ALTER TABLE evaluations ALTER COLUMN response SET COMPRESSION lz4';
  EXECUTE 'ALTER TABLE audit_events ALTER COLUMN payload SET COMPRESSION lz4';
EXCEPTION
  WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 compression is not available on this server; the default compression stays';
END;
$$;
