-- What the owner of the application's views holds on their tables is now derived from what the application holds
-- on the views (roles.sql), instead of a second list of the same columns; the grants it gives are the same. A
-- definition file changed: this migration marks the version it came with.
SELECT 1;
