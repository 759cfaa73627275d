DROP FUNCTION cost_refused(text);
