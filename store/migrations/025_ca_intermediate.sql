-- The intermediate that signs, once the operator declared a domain and
-- it was issued anew: its certificate, and its key sealed under the
-- controllers' at-rest key. Every controller takes it from here, so the
-- one that leads next signs with it. One row; none while the
-- intermediate is genesis's.
CREATE TABLE ca_intermediate (
	id         INTEGER PRIMARY KEY CHECK (id = 1),
	serial     TEXT NOT NULL,
	cert_pem   TEXT NOT NULL,
	key_sealed TEXT NOT NULL,
	set_at     TEXT NOT NULL
);
