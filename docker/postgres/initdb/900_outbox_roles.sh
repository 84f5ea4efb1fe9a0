#!/bin/bash
# 900_outbox_roles.sh — runs once, after the schema files, when the official
# postgres image initialises an empty data directory:
#   * sets the password of outbox_relay (created by sql/003_relay_role.sql:
#     LOGIN REPLICATION, SELECT and DELETE on the outbox, nothing else);
#   * creates outbox_consume for the demo consumer: it may record processed
#     and failed events and update loyalty_points, nothing else.
# No pg_hba line is added: the relayer's connections (replication=database)
# are logical replication connections, which pg_hba matches by database name
# like ordinary ones, so the base image's "host all all all scram-sha-256"
# admits both; a "replication" line would only cover physical replication.
set -Eeuo pipefail

: "${RELAY_DB_PASSWORD:?must be set: the password of the outbox_relay role}"

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
     -v relay_pw="$RELAY_DB_PASSWORD" <<'SQL'
ALTER ROLE outbox_relay PASSWORD :'relay_pw';
SQL

if [ -n "${CONSUMER_DB_PASSWORD:-}" ]; then
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
         -v consume_pw="$CONSUMER_DB_PASSWORD" <<'SQL'
CREATE ROLE outbox_consume LOGIN PASSWORD :'consume_pw';
GRANT USAGE ON SCHEMA public TO outbox_consume;
GRANT SELECT, INSERT ON public.processed_events, public.failed_events TO outbox_consume;
GRANT SELECT, INSERT, UPDATE ON public.loyalty_points TO outbox_consume;
SQL
fi
