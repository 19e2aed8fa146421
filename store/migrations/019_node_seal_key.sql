-- The public half of the sealing key a node made when it joined
-- ("x25519:" and base64url), what the controller seals a value to for
-- that node alone. A node that made none holds ''.
ALTER TABLE nodes ADD COLUMN seal_key TEXT NOT NULL DEFAULT '';
