-- MariaDB fixture for the ClueCDC test topology (compose.test.yaml, service mariadb).
-- Runs once, when the data volume is initialised, as root. The image has already created the
-- database cdc_source and the user cdc_user with all privileges on it (MARIADB_DATABASE,
-- MARIADB_USER, MARIADB_PASSWORD). FIXTURE-ONLY CREDENTIALS, the same as the native stack
-- (scripts/stack env).
--
-- cdc_source is a Debezium MariaDB source (the server writes a ROW binlog with FULL images);
-- cdc_dest is a Debezium JDBC sink destination.
CREATE DATABASE IF NOT EXISTS cdc_dest;
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc_user'@'%';
GRANT ALL PRIVILEGES ON cdc_source.* TO 'cdc_user'@'%';
GRANT ALL PRIVILEGES ON cdc_dest.* TO 'cdc_user'@'%';
FLUSH PRIVILEGES;
