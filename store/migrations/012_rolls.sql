-- A roll of a release over nodes (mesh release roll): one node at a time,
-- in position order, each healthy on the digest before the next is sent.
-- At most one roll is running or halted at once.
CREATE TABLE rolls (
	id                INTEGER PRIMARY KEY AUTOINCREMENT,
	digest            TEXT NOT NULL REFERENCES releases (digest),
	healthy_within_ms INTEGER NOT NULL,
	state             TEXT NOT NULL, -- running, halted, done, aborted
	cause             TEXT NOT NULL DEFAULT '', -- why it halted
	started_at        TEXT NOT NULL,
	ended_at          TEXT
);

-- Each node of a roll, in the order it is rolled.
CREATE TABLE roll_nodes (
	roll       INTEGER NOT NULL REFERENCES rolls (id) ON DELETE CASCADE,
	position   INTEGER NOT NULL,
	node       TEXT NOT NULL, -- kept when the node is removed: the roll's history
	state      TEXT NOT NULL, -- pending, sending, healthy, failed, skipped
	cause      TEXT NOT NULL DEFAULT '',
	started_at TEXT,
	ended_at   TEXT,
	-- The release the node's declarations carried before its first step
	-- (NULL: none), once kept is 1: an abort declares it again.
	previous   TEXT,
	kept       INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (roll, position)
);

-- The release each node's declarations carry as its binary resource: set
-- when a roll sends it the release, and composed into every declaration
-- after (a push does not take it away).
CREATE TABLE node_binaries (
	node   TEXT PRIMARY KEY REFERENCES nodes (name) ON DELETE CASCADE,
	digest TEXT NOT NULL REFERENCES releases (digest)
);

-- The versions the node's launcher gave up on, as its last heartbeat
-- reported them (JSON, at most spec.MaxFallbacks).
ALTER TABLE nodes ADD COLUMN fallbacks TEXT NOT NULL DEFAULT '';
