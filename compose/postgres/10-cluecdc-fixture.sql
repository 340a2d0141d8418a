-- PostgreSQL fixture for the ClueCDC compose topology (compose.yaml, service postgres).
-- Runs once, when the data volume is initialised, as the image's superuser (postgres).
-- FIXTURE-ONLY CREDENTIALS, the same names and values as the native stack (scripts/stack env):
-- never reuse them outside a local test stack.
--
-- cdc_user    LOGIN REPLICATION role that Debezium (pgoutput) connects as. It owns both
--             databases, so the tables it creates are its own and Debezium's
--             publication.autocreate.mode=filtered can create the publication for them.
-- cdc_source  the captured source database.
-- cdc_dest    a destination database for the Debezium JDBC sink.
CREATE ROLE cdc_user WITH LOGIN REPLICATION PASSWORD 'cdc_user_fixture_pw';
CREATE DATABASE cdc_source OWNER cdc_user;
CREATE DATABASE cdc_dest OWNER cdc_user;
