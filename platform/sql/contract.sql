-- The application's names for the sweeper's tables (docs/integrating.md): views in `asset_sweeper` over the tables in
-- `asset_sweeper_private`, which no role of the application may use. A view's insert and update reach its table as
-- Postgres's updatable views do, checked against the privileges of the view's owner, `asset_sweeper_contract`
-- (roles.sql), which holds SELECT, INSERT and UPDATE of columns on the tables and nothing more. Postgres lets a role
-- lock a table in any mode only with UPDATE, DELETE or TRUNCATE of the whole table, and a view's lock reaches its
-- table with its owner's privileges: so a role that may delete a declaration through its view still cannot lock
-- the table beyond what a write of its own takes. Its deletes go through the function below instead, as the owner.

-- The one delete a view passes on: the row the statement found, by its key, and nothing when a settle or another
-- writer removed it first (the statement then counts no row, as a delete of a row already gone does).
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_contract_delete() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_TABLE_SCHEMA <> 'asset_sweeper' OR TG_LEVEL <> 'ROW' OR TG_OP <> 'DELETE' THEN
        RAISE EXCEPTION 'asset_sweeper_contract_delete runs only as the delete of a view of asset_sweeper';
    END IF;
    CASE TG_TABLE_NAME
        WHEN 'asset_reference_sources' THEN
            DELETE FROM asset_sweeper_private.asset_reference_sources WHERE id = OLD.id;
        WHEN 'asset_reference_exclusions' THEN
            DELETE FROM asset_sweeper_private.asset_reference_exclusions
             WHERE table_schema = OLD.table_schema AND table_name = OLD.table_name AND column_name = OLD.column_name;
        WHEN 'asset_key_sources' THEN
            DELETE FROM asset_sweeper_private.asset_key_sources WHERE id = OLD.id;
        WHEN 'workspace_quotas' THEN
            DELETE FROM asset_sweeper_private.workspace_quotas WHERE workspace_id = OLD.workspace_id;
        WHEN 'retention_rules' THEN
            DELETE FROM asset_sweeper_private.retention_rules WHERE id = OLD.id;
        ELSE
            RAISE EXCEPTION 'asset_sweeper.% takes no delete', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
    END CASE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN OLD;
END
$$;

CREATE OR REPLACE TRIGGER asset_reference_sources_delete INSTEAD OF DELETE ON asset_sweeper.asset_reference_sources
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_contract_delete();
CREATE OR REPLACE TRIGGER asset_reference_exclusions_delete INSTEAD OF DELETE ON asset_sweeper.asset_reference_exclusions
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_contract_delete();
CREATE OR REPLACE TRIGGER asset_key_sources_delete INSTEAD OF DELETE ON asset_sweeper.asset_key_sources
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_contract_delete();
CREATE OR REPLACE TRIGGER workspace_quotas_delete INSTEAD OF DELETE ON asset_sweeper.workspace_quotas
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_contract_delete();
CREATE OR REPLACE TRIGGER retention_rules_delete INSTEAD OF DELETE ON asset_sweeper.retention_rules
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_contract_delete();
