CREATE TABLE tokens (
	id         TEXT PRIMARY KEY,
	node       TEXT NOT NULL,
	enrol_nkey TEXT NOT NULL UNIQUE,
	created_at TEXT NOT NULL,
	expires_at TEXT NOT NULL,
	used_at    TEXT,
	revoked_at TEXT
);
