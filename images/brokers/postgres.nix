# PostgreSQL as a queue: node 0 is the primary, nodes 1 and 2 synchronous
# streaming standbys (pg_basebackup + replication slots). A commit waits until
# ANY 1 of the 2 standbys has written (not yet flushed) the WAL: remote_write.
{ pkgs, ... }:
let pg = pkgs.postgresql_17; in
{
  mqlab.node = {
    broker = "postgres";
    package = pg;
    version = pg.version;
    ports = [ 5432 ];
    runtimeInputs = [ pg ];
    settings = {
      wal_level = "replica";
      synchronous_commit = "remote_write";
      # STANDBYS is replaced at boot by the standbys' application names (s1, s2: mqlab/brokers/postgres/node.py)
      synchronous_standby_names = "ANY 1 (STANDBYS)";
      max_wal_senders = 10;
      max_replication_slots = 10;
      hot_standby = "on";
      fsync = "on";
      full_page_writes = "on";
      wal_keep_size = "1GB";
    };
    services.mqlab-postgres = ''
      data=/var/lib/mqlab/postgres
      conf=/run/mqlab/conf
      if [ ! -f "$data/PG_VERSION" ]; then
        if [ "$(cat $conf/role)" = primary ]; then
          initdb -D "$data" --auth-local=peer --auth-host=trust
          pg_ctl -D "$data" -o "-c listen_addresses=''' -c config_file=$data/postgresql.conf" -w start
          psql -d postgres -c "CREATE ROLE replicator WITH REPLICATION LOGIN"
          for s in $(cat $conf/standbys); do
            psql -d postgres -c "SELECT pg_create_physical_replication_slot('$s')"
          done
          pg_ctl -D "$data" -w stop
        else
          until pg_basebackup -h "$MQLAB_PEER_0" -U replicator -D "$data" -X stream -R; do sleep 2; done
          # -R wrote its own primary_conninfo: the rendered one names this standby (s1, s2)
          cat $conf/standby.conf >> "$data/postgresql.auto.conf"
        fi
      fi
      exec postgres -D "$data" -c config_file="$conf/postgresql.conf" -c hba_file="$conf/pg_hba.conf" -c data_directory="$data"
    '';
  };
}
