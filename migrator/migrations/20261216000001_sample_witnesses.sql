-- What the schema check's sample last read of each plain table, when it found nothing there: which rows (the
-- table's first rows up to `head_until`, or all of them when NULL, and every row from `tail_from`), as a count and a
-- sum of a hash of each row version's `ctid` and `xmin`. A table whose rows there are the same versions is not read
-- again (schema::sample::witness): at GitLab's size, reading 4 000 unchanged columns every pass was most of the pass.
-- Written by the sweep, in the snapshot its sample read; the operator's commands only compare.
CREATE TABLE asset_sweeper_private.sample_witnesses (
    relid        oid         PRIMARY KEY,
    -- The candidate columns read, their types, and the sample's sizes: another reading is another sample.
    signature    text        NOT NULL,
    -- A rewrite (a new file), a schema change anywhere, or a file of another length is read again.
    relfilenode  oid         NOT NULL,
    generation   bigint      NOT NULL,
    blocks       bigint      NOT NULL CHECK (blocks >= 0),
    head_until   tid,
    tail_from    tid         NOT NULL,
    tuples       bigint      NOT NULL CHECK (tuples >= 0),
    fingerprint  numeric     NOT NULL,
    -- The snapshot's next transaction id: past 2^31 transactions later, an `xmin` may be spelled again.
    recorded_xid xid8        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
