-- The sweep: operator approvals for the blast-radius brake, and a first due time for every upload.

-- An operator's release of a braked workspace (invariant 11). While it is unexpired, passes enqueue that
-- workspace's due assets whatever the brake's figures; each such pass names the approval in its run record.
CREATE TABLE brake_approvals (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id uuid        NOT NULL,
    approved_by  text        NOT NULL CHECK (approved_by <> ''),
    reason       text        NOT NULL CHECK (reason <> ''),
    approved_at  timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL DEFAULT now() + interval '24 hours',
    CHECK (expires_at > approved_at)
);
CREATE INDEX brake_approvals_workspace ON brake_approvals (workspace_id, expires_at);

-- An upload that is never attached must still be looked at. The application need not set `due_at` on a
-- `pending` row: it is due one day after the upload (the default grace period), and settlement decides then
-- whether it has been abandoned long enough to delete or should be looked at again later.
CREATE FUNCTION asset_sweeper_pending_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.due_at := NEW.created_at + interval '24 hours';
    RETURN NEW;
END
$$;

CREATE TRIGGER assets_pending_due
    BEFORE INSERT ON assets
    FOR EACH ROW WHEN (NEW.state = 'pending' AND NEW.due_at IS NULL)
    EXECUTE FUNCTION asset_sweeper_pending_due();
