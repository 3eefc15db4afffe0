-- Tags: named, retained snapshots of actors (docs/actors.md, Tags and
-- fork). As in 00001 the record is bolt's JSON. A tag names its
-- template, which therefore cannot be deleted under it, nor (through the
-- template) its atespace.

-- +goose Up
CREATE TABLE tags (
	-- "<atespace>/<name>": ListTags' order.
	key      text COLLATE "C" PRIMARY KEY,
	atespace text COLLATE "C" NOT NULL,
	name     text COLLATE "C" NOT NULL,
	uid      text NOT NULL,
	template text COLLATE "C" NOT NULL,
	record   bytea NOT NULL,
	CONSTRAINT tags_template_fkey FOREIGN KEY (atespace, template) REFERENCES templates (atespace, name)
);
-- For the foreign key's check when a template is deleted.
CREATE INDEX tags_template ON tags (atespace, template);
