-- The overlay's range while it is on: one row, absent while it is off.
-- next_host is the allocation counter: the host number (the offset in
-- the range) the next address is tried at; it only rises, and wraps to 1
-- only when the range's end is reached.
CREATE TABLE overlay (
	id         INTEGER PRIMARY KEY CHECK (id = 1),
	cidr       TEXT NOT NULL,
	enabled_at TEXT NOT NULL,
	next_host  INTEGER NOT NULL
);
-- Each node's WireGuard public key (standard base64; '' for a node that
-- made none), its overlay address ('' while the overlay is off or it has
-- no key), and what its host last reported of its overlay: its endpoints
-- (JSON, '' for none), whether it relays, its mode, and the whole report
-- (JSON of spec.OverlayState, its peers' paths among it) and when.
ALTER TABLE nodes ADD COLUMN wg_key TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN overlay_ip TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN overlay_endpoints TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN overlay_relay INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN overlay_mode TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN overlay_state TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN overlay_at TEXT;
CREATE UNIQUE INDEX nodes_overlay_ip ON nodes (overlay_ip) WHERE overlay_ip != '';
-- The overlay addresses of removed nodes, and the roster in force when
-- each was released: one is given again only once the counter wrapped
-- and every node holds a roster issued after its release.
CREATE TABLE overlay_released (
	ip          TEXT PRIMARY KEY,
	roster_seq  INTEGER NOT NULL,
	released_at TEXT NOT NULL
);
