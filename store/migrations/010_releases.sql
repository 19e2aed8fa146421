-- Every mesh binary published (mesh release publish), in the order it was:
-- its digest, the target read from the file, and its bytes, a blob.
CREATE TABLE releases (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	digest       TEXT NOT NULL UNIQUE, -- hex SHA-256: the version a host running it reports
	blob         TEXT NOT NULL REFERENCES blobs (digest), -- 'sha256:' || digest
	goos         TEXT NOT NULL,
	goarch       TEXT NOT NULL,
	go_version   TEXT NOT NULL,
	size         INTEGER NOT NULL,
	published_at TEXT NOT NULL
);
