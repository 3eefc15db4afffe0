-- Signing keys: the keys the API servers sign actor identity tokens with
-- (internal/identity). As in 00001 the record is bolt's JSON. The
-- primary key on generation is what makes replicas racing to add the
-- next key create exactly one.

-- +goose Up
CREATE TABLE signing_keys (
	generation bigint PRIMARY KEY,
	id         text COLLATE "C" NOT NULL UNIQUE,
	record     bytea NOT NULL
);
