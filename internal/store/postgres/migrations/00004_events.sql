-- Events: actors' state transitions and failures (docs/logs-and-events.md).
-- The record is bolt's JSON; seq is the watchers' cursor. AppendEvent
-- takes a transaction-level advisory lock before inserting, so events
-- commit in seq order across API server replicas and a watcher polling
-- seq > cursor never passes over one committed later with a lower seq.
-- Events outlive their actor (no foreign key) until pruned.

-- +goose Up
CREATE TABLE events (
	seq      bigserial PRIMARY KEY,
	atespace text COLLATE "C" NOT NULL,
	actor    text COLLATE "C" NOT NULL,
	time     timestamptz NOT NULL,
	record   bytea NOT NULL
);
CREATE INDEX events_actor ON events (atespace, actor, seq);
CREATE INDEX events_time ON events (time);
