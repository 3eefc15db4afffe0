-- Alarms: scheduled wake-ups of actors (docs/alarms.md). As in 00001 the
-- record is bolt's JSON; the columns are what queries filter and order
-- on. An actor's alarms go with it (ON DELETE CASCADE), in DeleteActor's
-- transaction.

-- +goose Up
CREATE TABLE alarms (
	id           text COLLATE "C" PRIMARY KEY,
	-- The actor's "<atespace>/<name>".
	actor        text COLLATE "C" NOT NULL REFERENCES actors (key) ON DELETE CASCADE,
	atespace     text COLLATE "C" NOT NULL,
	state        text NOT NULL,
	version      bigint NOT NULL,
	-- ListAlarms' order, bolt's byte-wise id order after it.
	next_attempt timestamptz NOT NULL,
	record       bytea NOT NULL
);
CREATE INDEX alarms_actor ON alarms (actor);
CREATE INDEX alarms_next ON alarms (next_attempt, id);
