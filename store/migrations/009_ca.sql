-- The public domains the operator declared: the CA's intermediate may sign
-- names under each (and under .internal, which is not listed).
CREATE TABLE ca_domains (
	name     TEXT PRIMARY KEY,
	added_at TEXT NOT NULL
);

-- Every leaf the controller signed for a node, in the order it did.
CREATE TABLE certs (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	serial    TEXT NOT NULL UNIQUE,
	node      TEXT NOT NULL,
	names     TEXT NOT NULL, -- JSON array, as requested
	not_after TEXT NOT NULL,
	issued_at TEXT NOT NULL
);

-- Each name of each leaf, to find the latest leaf a node holds for a name.
CREATE TABLE cert_names (
	cert_id INTEGER NOT NULL REFERENCES certs (id) ON DELETE CASCADE,
	node    TEXT NOT NULL,
	name    TEXT NOT NULL,
	PRIMARY KEY (node, name, cert_id)
);
