-- Windows in which nothing is destroyed (docs/operating.md, "Holds"): declared by the application around a
-- migration (`asset_sweeper_hold`, lifecycle/sql/lifecycle.sql) or by an operator (`asset-sweeper hold`). While one
-- is open, deletes and purges wait in every workspace until it ends or is released; retiring, which a restore
-- undoes, goes on. Written only through those functions and the operator's CLI: the application's roles may
-- declare and release their own, not read or change the table.
CREATE TABLE destruction_holds (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reason      text        NOT NULL CHECK (length(btrim(reason)) BETWEEN 1 AND 500),
    declared_by text        NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now(),
    ends_at     timestamptz NOT NULL,
    released_by text,
    released_at timestamptz,
    CHECK (ends_at > declared_at),
    CHECK ((released_by IS NULL) = (released_at IS NULL))
);
CREATE INDEX destruction_holds_open ON destruction_holds (ends_at) WHERE released_at IS NULL;
