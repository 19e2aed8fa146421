CREATE TABLE modules (
	name          TEXT PRIMARY KEY,
	version       TEXT NOT NULL,
	body          TEXT NOT NULL,
	registered_at TEXT NOT NULL
);

CREATE TABLE assignments (
	module      TEXT NOT NULL REFERENCES modules (name),
	node        TEXT NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
	assigned_at TEXT NOT NULL,
	PRIMARY KEY (module, node)
);

CREATE TABLE blobs (
	digest TEXT PRIMARY KEY,
	size   INTEGER NOT NULL,
	data   BLOB NOT NULL
);

-- The last declaration sent to each node: its exact signed bytes.
CREATE TABLE declarations (
	node       TEXT PRIMARY KEY REFERENCES nodes (name) ON DELETE CASCADE,
	seq        INTEGER NOT NULL,
	body       BLOB NOT NULL,
	sig        BLOB NOT NULL,
	sent_at    TEXT NOT NULL,
	expires_at TEXT NOT NULL
);

-- The last report of each node.
CREATE TABLE reports (
	node        TEXT PRIMARY KEY REFERENCES nodes (name) ON DELETE CASCADE,
	seq         INTEGER NOT NULL,
	body        TEXT NOT NULL,
	received_at TEXT NOT NULL
);
