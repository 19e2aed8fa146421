-- A blob is kept as chunks in the order of its bytes, so neither taking an
-- upload nor serving a range holds more than a chunk in memory. A blob
-- stored before this migration becomes one chunk at 0.
CREATE TABLE blob_chunks (
	digest TEXT NOT NULL,
	start  INTEGER NOT NULL, -- the offset of the chunk's first byte
	data   BLOB NOT NULL,
	PRIMARY KEY (digest, start)
);
INSERT INTO blob_chunks (digest, start, data) SELECT digest, 0, data FROM blobs;
-- A blob listed here is whole, its digest verified.
ALTER TABLE blobs DROP COLUMN data;

-- Uploads under way: what was received (its chunks are in blob_chunks),
-- and the running SHA-256 of it, so the next chunk continues it after a
-- restart too.
CREATE TABLE blob_uploads (
	digest     TEXT PRIMARY KEY,
	size       INTEGER NOT NULL,
	received   INTEGER NOT NULL,
	hash       BLOB NOT NULL, -- the SHA-256 state, as crypto/sha256 marshals it
	updated_at TEXT NOT NULL
);
