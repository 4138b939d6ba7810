-- Values the census could not read whole within its batch limit (`CENSUS_BATCH_TIMEOUT`), even one at a time: a
-- comment of a hundred megabytes, a type whose output function crawls. Each is read from its start as far as the
-- limit allows (`read_chars`), what that part names is held, and the scan moves on, so one row never stops its
-- column's proof; the rest of the value is not proven, and `status` names the row. A clean end of the column's
-- next scan forgets the values it did not record again (docs/design.md, "When it cannot read").
CREATE TABLE census_unread (
    relid        oid         NOT NULL,
    attnum       smallint    NOT NULL,
    -- The row's `ctid` when it was tried: what an operator looks up.
    record       text        NOT NULL,
    -- Its size as stored (compressed or not); unknown when even its first part could not be read.
    stored_bytes bigint,
    read_chars   integer     NOT NULL CHECK (read_chars >= 0),
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (relid, attnum, record)
);
