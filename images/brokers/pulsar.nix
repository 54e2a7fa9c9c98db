# Apache Pulsar: on each of the 3 nodes a ZooKeeper (metadata), a BookKeeper
# bookie and a broker. Ledgers: ensemble 3, write quorum 3, ack quorum 2;
# bookies fsync the journal. Package: upstream release, NOT PINNED yet (nix/upstream.nix).
{ pkgs, ... }:
let pulsar = (import ../../nix/upstream.nix { inherit pkgs; }).pulsar; in
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
      allowAutoTopicCreation = false;
    };
    services.mqlab-pulsar-zookeeper = ''
      mkdir -p /var/lib/mqlab/pulsar/zookeeper
      cp /run/mqlab/conf/myid /var/lib/mqlab/pulsar/zookeeper/myid
      exec pulsar zookeeper -c /run/mqlab/conf/zookeeper.conf
    '';
    services.mqlab-pulsar-bookie = ''
      export PULSAR_BOOKKEEPER_CONF=/run/mqlab/conf/bookkeeper.conf
      exec pulsar bookie
    '';
    services.mqlab-pulsar-broker = ''
      export PULSAR_BROKER_CONF=/run/mqlab/conf/broker.conf
      exec pulsar broker
    '';
  };
}
