-- Observed use (docs/design.md, "Observed use"): a file somebody reads is a file somebody uses. The sweep reads the
-- bucket's S3 server access logs, and a CloudFront distribution's standard logs, where AWS delivers them; these
-- tables keep where each source stands, which of its log objects were read, and the newest read of each file.

-- One row per configured source, written by the sweep each pass: how far the logs AWS has delivered reach
-- (`newest_delivered_at`, the newest log object read), how late they may be (`delivery_lag`), what was read and
-- skipped, and why the source could not be read (`error`). The consumer removes nothing while a source's
-- delivered logs do not reach past a decision by the lag, or while a source cannot be read.
CREATE TABLE asset_sweeper_private.log_sources (
    source              text PRIMARY KEY CHECK (source IN ('s3', 'cloudfront')),
    location            text NOT NULL,
    delivery_lag        interval NOT NULL,
    newest_delivered_at timestamptz,
    newest_request_at   timestamptz,
    objects_read        bigint NOT NULL DEFAULT 0,
    lines_read          bigint NOT NULL DEFAULT 0,
    reads_recorded      bigint NOT NULL DEFAULT 0,
    requests_ignored    bigint NOT NULL DEFAULT 0,
    lines_skipped       bigint NOT NULL DEFAULT 0,
    -- The latest skipped lines, newest last: [{"object", "line", "reason"}], at most twenty.
    skipped             jsonb NOT NULL DEFAULT '[]',
    listed_at           timestamptz,
    error               text,
    error_at            timestamptz,
    configured_at       timestamptz NOT NULL DEFAULT now()
);

-- The log objects read, so one delivered late, or listed twice, is read once. Kept for as long as a late
-- delivery could still be listed again.
CREATE TABLE asset_sweeper_private.log_objects (
    source       text NOT NULL REFERENCES asset_sweeper_private.log_sources (source) ON DELETE CASCADE,
    object_key   text NOT NULL,
    delivered_at timestamptz NOT NULL,
    lines        bigint NOT NULL,
    read_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, object_key)
);
CREATE INDEX log_objects_delivered ON asset_sweeper_private.log_objects (source, delivered_at);

-- The newest successful read of each stored object the logs named: when, through which source, by whom (the IAM
-- principal S3 names; none for an anonymous or CloudFront request), from which site, by what kind of client.
CREATE TABLE asset_sweeper_private.observed_reads (
    storage_key   text PRIMARY KEY,
    read_at       timestamptz NOT NULL,
    source        text NOT NULL,
    requester     text,
    referrer_host text,
    client        text NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now()
);
