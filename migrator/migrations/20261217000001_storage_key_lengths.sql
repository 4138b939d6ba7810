-- The lengths of the storage keys, so a census batch reads the shortest and the longest in its own snapshot at the
-- cost of two index probes, and compares with the keys only the texts as long as one (schema::census::scan): most
-- texts of an application (prose, HTML, JSON) are longer than any key, and each used to search the keys' index.
CREATE INDEX assets_storage_key_length ON asset_sweeper_private.assets (octet_length(storage_key));
