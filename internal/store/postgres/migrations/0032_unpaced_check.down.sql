DROP FUNCTION ratelane_unpaced(boolean);
