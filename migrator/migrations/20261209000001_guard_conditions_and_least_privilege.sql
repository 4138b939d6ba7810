-- The reference guard's two triggers per column (guards.sql): one after an insert whose value is there, one after
-- an update that changed it, each with a condition Postgres evaluates without calling the function, so an update
-- that leaves the reference alone costs a comparison; the conditions name the column, so it cannot be retyped or
-- dropped under its guard; and each guarded column (but a key source's) gets a trigger function of its own that
-- names it, made by `guards install`, so no write builds a statement to read it. Guards installed before this
-- version are reinstalled by `asset-sweeper guards install` (the schema check names them until then). Each sweeper
-- login has exactly the statements its function issues, table by table (roles.sql). Both are definition files;
-- this migration marks the version they came with.
SELECT 1;
