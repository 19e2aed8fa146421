CREATE TABLE mesh (
	id         INTEGER PRIMARY KEY CHECK (id = 1),
	name       TEXT NOT NULL,
	created_at TEXT NOT NULL
);

CREATE TABLE operators (
	name       TEXT PRIMARY KEY,
	nkey       TEXT NOT NULL UNIQUE,
	created_at TEXT NOT NULL
);

CREATE TABLE nodes (
	name         TEXT PRIMARY KEY,
	address      TEXT NOT NULL,
	nkey         TEXT NOT NULL UNIQUE,
	joined_at    TEXT NOT NULL,
	last_heard   TEXT,
	host_version TEXT NOT NULL DEFAULT '',
	protocol     INTEGER NOT NULL DEFAULT 0,
	applied_seq  INTEGER NOT NULL DEFAULT 0,
	facts        TEXT,
	facts_at     TEXT
);
