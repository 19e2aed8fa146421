-- The roster messages sent (protocol 3): the mesh's names, signed and
-- numbered on their own sequence, published once per change. The last few
-- are kept; the highest is the roster in force.
CREATE TABLE rosters (
	seq        INTEGER PRIMARY KEY,
	body       BLOB NOT NULL,
	sig        BLOB NOT NULL,
	content    TEXT NOT NULL, -- the digest of the names alone, without sequence and times
	sent_at    TEXT NOT NULL,
	expires_at TEXT NOT NULL
);
