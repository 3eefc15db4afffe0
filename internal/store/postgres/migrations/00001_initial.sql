-- The first schema of the PostgreSQL store. Forward-only: there is no
-- Down section; a change is a new, higher-numbered file.
--
-- Each record is the JSON bolt stores (internal/codec) in `record` (bytea:
-- nothing queries inside it, and jsonb refuses strings with a NUL byte), and
-- the fields that queries filter, join, lock or compare on are real
-- columns beside it, written from the same struct in the same statement.
-- Times live in the JSON (RFC 3339, nanoseconds: they round-trip
-- exactly); only leases' expiries are timestamptz, computed by the
-- database clock.
--
-- Keys sort as bolt's do, byte-wise (COLLATE "C"), so list order and
-- page tokens match across backends.

-- +goose Up
CREATE TABLE atespaces (
	name   text COLLATE "C" PRIMARY KEY,
	record bytea NOT NULL
);

CREATE TABLE templates (
	-- "<atespace>/<name>", the order ListTemplates returns.
	key      text COLLATE "C" PRIMARY KEY,
	atespace text COLLATE "C" NOT NULL REFERENCES atespaces (name),
	name     text COLLATE "C" NOT NULL,
	uid      text NOT NULL,
	version  bigint NOT NULL,
	-- The ActorTemplateSpec in protobuf wire form: it is an API message.
	spec     bytea NOT NULL,
	record   bytea NOT NULL,
	UNIQUE (atespace, name)
);

CREATE TABLE actors (
	-- "<atespace>/<name>": list order and page tokens.
	key      text COLLATE "C" PRIMARY KEY,
	atespace text COLLATE "C" NOT NULL,
	name     text COLLATE "C" NOT NULL,
	uid      text NOT NULL,
	template text COLLATE "C" NOT NULL,
	version  bigint NOT NULL,
	state    text NOT NULL,
	-- The worker the actor holds; NULL when none.
	worker   text COLLATE "C",
	record   bytea NOT NULL,
	-- An actor's template (and so its atespace) cannot be deleted under it.
	FOREIGN KEY (atespace, template) REFERENCES templates (atespace, name)
);
-- For the foreign key's check when a template is deleted.
CREATE INDEX actors_template ON actors (atespace, template);
CREATE INDEX actors_worker ON actors (worker) WHERE worker IS NOT NULL;

-- Workers are all columns: small, and every field is read by claims.
CREATE SEQUENCE worker_revs;
CREATE TABLE workers (
	name          text COLLATE "C" PRIMARY KEY,
	node          text COLLATE "C" NOT NULL,
	tunnel_addr   text NOT NULL,
	sandbox_class text NOT NULL,
	labels        jsonb NOT NULL DEFAULT '{}',
	-- The holding actor's uid and "<atespace>/<name>"; NULL when free.
	actor_uid     text,
	actor         text,
	-- Revision: from one sequence, set on insert (default) and on every
	-- update (trigger), so the Store's in-memory view of the workers
	-- applies a row only if it is newer than what it holds (a row's
	-- updates are serialised by its lock, and the trigger runs under it,
	-- so its revisions grow in commit order).
	rev           bigint NOT NULL DEFAULT nextval('worker_revs')
);
-- Claims look for free workers, often on one node, in (node, name) order.
CREATE INDEX workers_free ON workers (node, name) WHERE actor_uid IS NULL;
-- Worker selectors: labels @> selector.
CREATE INDEX workers_labels ON workers USING gin (labels jsonb_path_ops);

-- +goose StatementBegin
CREATE FUNCTION workers_rev() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.rev := nextval('worker_revs');
	RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER workers_rev BEFORE UPDATE ON workers
	FOR EACH ROW EXECUTE FUNCTION workers_rev();

-- Every change of a worker is announced on channel ate_workers, payload
-- {"name": …, "rev": …, "deleted": true|false}: for a delete the gone
-- row's rev, so a listener can tell it from an older read of the row.
-- Not the row itself: labels could exceed NOTIFY's 8000-byte limit, and
-- listeners read the row. Delivered at commit, so never for a change
-- that rolled back.
-- +goose StatementBegin
CREATE FUNCTION workers_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		PERFORM pg_notify('ate_workers', json_build_object('name', OLD.name, 'rev', OLD.rev, 'deleted', true)::text);
	ELSE
		PERFORM pg_notify('ate_workers', json_build_object('name', NEW.name, 'rev', NEW.rev, 'deleted', false)::text);
	END IF;
	RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER workers_notify AFTER INSERT OR UPDATE OR DELETE ON workers
	FOR EACH ROW EXECUTE FUNCTION workers_notify();

CREATE TABLE leases (
	key    text PRIMARY KEY,
	holder text NOT NULL,
	token  bigint NOT NULL,
	expiry timestamptz NOT NULL
);
-- Fencing tokens: one sequence, so a token grows across keys and holders.
CREATE SEQUENCE lease_tokens;
