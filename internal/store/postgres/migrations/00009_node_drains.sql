-- Node drains (DrainNode, docs/ha.md): a record every replica reads, so
-- none places actors on a drained node, until RemoveNode deletes it. As
-- in 00001 the record is bolt's JSON.

-- +goose Up
CREATE TABLE node_drains (
	node   text COLLATE "C" PRIMARY KEY,
	record bytea NOT NULL
);
