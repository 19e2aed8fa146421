-- A held node is sent nothing until it is released.
ALTER TABLE nodes ADD COLUMN held_at TEXT;
ALTER TABLE nodes ADD COLUMN held_reason TEXT NOT NULL DEFAULT '';

-- Every operator API call: who, when, what (secrets redacted), and how it ended.
CREATE TABLE audit (
	id       INTEGER PRIMARY KEY AUTOINCREMENT,
	at       TEXT NOT NULL,
	operator TEXT NOT NULL,
	verb     TEXT NOT NULL,
	args     TEXT NOT NULL,
	outcome  TEXT NOT NULL
);
CREATE INDEX audit_at ON audit (at);
