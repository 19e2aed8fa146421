-- A token that enrols a controller besides its node: 1, or 0 for a
-- host's.
ALTER TABLE tokens ADD COLUMN controller INTEGER NOT NULL DEFAULT 0;
