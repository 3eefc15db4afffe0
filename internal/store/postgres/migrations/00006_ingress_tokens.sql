-- Ingress tokens: bearer tokens the router accepts for an atespace's
-- actors whose template's ingress policy is "token" (docs/security.md,
-- Router ingress policy). As in 00001 the record is bolt's JSON; hash is
-- the token's hex SHA-256 (the token itself is never stored). Deleting
-- the atespace deletes its tokens, so a re-created atespace of the same
-- name does not inherit them.

-- +goose Up
CREATE TABLE ingress_tokens (
	-- "<atespace>/<name>": ListIngressTokens' order.
	key      text COLLATE "C" PRIMARY KEY,
	atespace text COLLATE "C" NOT NULL REFERENCES atespaces (name) ON DELETE CASCADE,
	name     text COLLATE "C" NOT NULL,
	hash     text NOT NULL,
	record   bytea NOT NULL
);
-- FindIngressToken: the router's reviews.
CREATE INDEX ingress_tokens_hash ON ingress_tokens (atespace, hash);
