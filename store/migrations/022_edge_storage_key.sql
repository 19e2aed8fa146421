-- The mesh's edge storage key, which every value the edges share on the
-- bus is sealed under, itself sealed under the controller's at-rest key:
-- one row, made once, the first time an edge is composed.
CREATE TABLE edge_storage_key (
	id         INTEGER PRIMARY KEY CHECK (id = 1),
	sealed     TEXT NOT NULL,
	created_at TEXT NOT NULL
);
