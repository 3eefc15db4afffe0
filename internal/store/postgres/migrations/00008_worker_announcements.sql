-- Worker changes are no longer announced by a trigger inside the writing
-- transaction. A transaction that has issued NOTIFY takes, at commit, one
-- lock on the whole database cluster and holds it through its WAL
-- flush, so every claim and release of a worker committed one at a time
-- behind every other (issue 33, BENCHMARKS.md "The PostgreSQL control
-- plane"). Each Store now announces its own committed changes itself,
-- batched, after the commit, on the same channel (view.go).
--
-- A replica of an older ate still running during a rolling upgrade hears
-- the new batched payload as malformed and reloads its view whole, which
-- keeps it correct, at the cost of a reload per batch until it is
-- replaced.

-- +goose Up
DROP TRIGGER workers_notify ON workers;
DROP FUNCTION workers_notify();
