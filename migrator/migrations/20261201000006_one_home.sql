-- The grace floor's part an asset row holds by itself, which discovery reads while walking (reading each asset's
-- stored object there cost twice the rest of the batch); the whole floor is built on it, so the two cannot drift.
CREATE FUNCTION asset_sweeper_row_grace_ends(a assets, grace interval) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN greatest(a.updated_at, a.created_at) + grace;

CREATE OR REPLACE FUNCTION asset_sweeper_grace_ends(a assets, o stored_objects, grace interval) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN greatest(asset_sweeper_row_grace_ends(a, grace), o.updated_at + grace);

-- A JSON document refers to an asset when a string at its declared path spells the asset's id: lowercase,
-- uppercase, or a mixed case the reference guard or the census noted. The recheck (one id, bound as constants so
-- each `@?` is planned with its values) and discovery (a batch, inside one statement) both build their paths here.
-- The table's check keeps a noted spelling to the id's own letters, so splicing it into a path cannot inject.
CREATE FUNCTION asset_sweeper_id_matches(id uuid) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN format('@ == "%s" || @ == "%s"', id, upper(id::text))
           || coalesce((SELECT string_agg(format(' || @ == "%s"', s.spelling), '' ORDER BY s.spelling)
                          FROM asset_id_spellings s WHERE s.asset_id = id AND lower(s.spelling) = id::text), '');

-- `path` narrowed to the strings `matches` (from asset_sweeper_id_matches) accepts: what `@?` asks of a document.
CREATE FUNCTION asset_sweeper_path_matching(path text, matches text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN format('%s ? (%s)', path, matches);
