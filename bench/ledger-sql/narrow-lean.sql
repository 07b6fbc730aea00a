-- The narrow queue and the lean bound together: the projected floor of the two.
\ir narrow.sql
\ir lean.sql
