-- A credential minted for a consumer (a module on a node) of a grant, and
-- the node whose provider it was given. The credential is sealed under
-- the controller's at-rest key before it reaches the store. It goes with
-- the consumer's assignment (unassigned, or its node removed).
CREATE TABLE grants (
	module     TEXT NOT NULL,
	node       TEXT NOT NULL,
	grant      TEXT NOT NULL,
	provider   TEXT NOT NULL,
	credential TEXT NOT NULL,
	minted_at  TEXT NOT NULL,
	PRIMARY KEY (module, node, grant),
	FOREIGN KEY (module, node) REFERENCES assignments (module, node) ON DELETE CASCADE
);
CREATE INDEX grants_provider ON grants (provider);
