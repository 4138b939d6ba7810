-- What it costs and whether it worked (docs/operating.md, "Money and effect").

-- What each pass found of its effect: the money freed and still waiting, and the figures the effect alarms read
-- (the oldest overdue asset, due bytes growing while nothing settles, claims whose settlements never arrived). The
-- next pass reads the previous one's to tell growth from a level.
ALTER TABLE sweep_runs ADD COLUMN money jsonb, ADD COLUMN effect jsonb;

-- The bucket as AWS reports it, beside what the sweeper believes it holds: one row per day the sweep compared. The
-- reported side is S3's own storage metrics (CloudWatch `AWS/S3`, daily); the believed side is the sum of what the
-- rows account for. A row is written only when a new day's figures were read.
CREATE TABLE bucket_measurements (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    measured_at     timestamptz NOT NULL DEFAULT now(),
    bucket          text        NOT NULL,
    -- The day S3's figures are for (its metrics are stamped at midnight UTC).
    metric_day      date        NOT NULL,
    source          text        NOT NULL CHECK (source IN ('cloudwatch')),
    reported_bytes  bigint      NOT NULL CHECK (reported_bytes >= 0),
    reported_objects bigint     CHECK (reported_objects >= 0),
    -- Bytes per S3 storage type as reported ({"StandardStorage": 123, …}).
    reported_by_type jsonb      NOT NULL,
    believed_bytes  bigint      NOT NULL CHECK (believed_bytes >= 0),
    believed_objects bigint     NOT NULL CHECK (believed_objects >= 0),
    -- The believed side's parts: current objects the rows know, noncurrent versions within their window, orphans
    -- the newest reconciliation found.
    believed        jsonb       NOT NULL,
    -- Freed bytes whose versions expired two days or more before `metric_day` and that the bucket still reports.
    freed_not_shown bigint      NOT NULL DEFAULT 0 CHECK (freed_not_shown >= 0),
    drift_percent   numeric     NOT NULL,
    alarm_percent   integer     NOT NULL,
    cause           text,
    UNIQUE (bucket, metric_day)
);
CREATE INDEX bucket_measurements_newest ON bucket_measurements (bucket, metric_day DESC);
