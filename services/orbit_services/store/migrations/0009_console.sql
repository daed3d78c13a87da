-- The console (docs/console.md): a definition keeps the YAML it was
-- registered from, as it was sent, so the definitions page shows what its
-- author wrote; null for one registered as compiled IR (JSON), or before this.
ALTER TABLE definitions ADD COLUMN source text;
