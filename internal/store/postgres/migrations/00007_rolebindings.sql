-- Role bindings (internal/auth, docs/security.md): who may do what, per
-- atespace. As in 00001 the record is bolt's JSON; nothing references
-- them, so an atespace can be deleted under its bindings (they then
-- grant nothing until it is created again).

-- +goose Up
CREATE TABLE role_bindings (
	name   text COLLATE "C" PRIMARY KEY,
	record bytea NOT NULL
);
