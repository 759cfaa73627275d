DROP INDEX jobs_validated_kind;
DROP INDEX jobs_accepted_kind;
