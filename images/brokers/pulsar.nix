# Apache Pulsar, 3 nodes: on each a ZooKeeper (metadata), a BookKeeper bookie and a
# broker: 3 brokers and 3 bookies. Ledgers: ensemble 3, write quorum 3, ack quorum 2
# (mqperf 2021's setting; the driver also sets them on the namespace from the profile,
# pulsar-r3); bookies fsync the journal before they confirm. mqperf ran ZooKeeper,
# bookies and brokers on separate machines (3 + 3 + 2). Package: the upstream 3.0.1
# binary release, pinned in nix/upstream.nix (not built where this was written).
{ pkgs, ... }:
let
  pulsar = (import ../../nix/upstream.nix { inherit pkgs; }).pulsar;
  env = ''
    export JAVA_HOME=${pkgs.jdk17_headless}
    export PULSAR_LOG_DIR=/var/lib/mqlab/pulsar/logs
    mkdir -p "$PULSAR_LOG_DIR"
  '';
in
{
  mqlab.node = {
    broker = "pulsar";
    package = pulsar;
    version = pulsar.version;
    ports = [ 6650 8080 2181 2888 3888 3181 ];
    runtimeInputs = [ pulsar pkgs.jdk17_headless ];
    settings = {
      managedLedgerDefaultEnsembleSize = 3;
      managedLedgerDefaultWriteQuorum = 3;
      managedLedgerDefaultAckQuorum = 2;
      brokerDeduplicationEnabled = false;
      allowAutoTopicCreation = false; # the driver creates its topic (admin REST API)
    };
    services.mqlab-pulsar-zookeeper = env + ''
      mkdir -p /var/lib/mqlab/pulsar/zookeeper
      cp /run/mqlab/conf/myid /var/lib/mqlab/pulsar/zookeeper/myid
      export PULSAR_ZK_CONF=/run/mqlab/conf/zookeeper.conf
      exec pulsar zookeeper
    '';
    services.mqlab-pulsar-bookie = env + ''
      export PULSAR_BOOKKEEPER_CONF=/run/mqlab/conf/bookkeeper.conf
      exec pulsar bookie
    '';
    # node 0 registers the cluster (and BookKeeper's ledger layout) once, when ZooKeeper
    # has its quorum; bookies and brokers fail and are restarted until then
    services.mqlab-pulsar-broker = env + ''
      args=/run/mqlab/conf/cluster-metadata.args
      done=/var/lib/mqlab/pulsar/cluster-metadata.done
      if [ -f "$args" ] && [ ! -f "$done" ]; then
        mapfile -t init < "$args"
        pulsar initialize-cluster-metadata "''${init[@]}"
        touch "$done"
      fi
      export PULSAR_BROKER_CONF=/run/mqlab/conf/broker.conf
      exec pulsar broker
    '';
  };
}
