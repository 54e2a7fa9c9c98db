# Apache Pulsar, 3 nodes: on each a ZooKeeper (metadata), a BookKeeper bookie and a
# broker: 3 brokers and 3 bookies. Ledgers: ensemble 3, write quorum 3, ack quorum 2
# (mqperf 2021's setting; the driver also sets them on the namespace from the profile,
# pulsar-r3); bookies fsync the journal before they confirm. mqperf ran ZooKeeper,
# bookies and brokers on separate machines (3 + 3 + 2). Package: the server mqlab runs
# locally, from the same Maven Central jars and sha256s (nix/servers.nix,
# mqlab/brokers/servers.lock.json), each process started by its main class with the JVM
# flags of mqlab's local cluster (mqlab/brokers/pulsar/cluster.py).
{ pkgs, ... }:
let
  pulsar = (import ../../nix/servers.nix { inherit pkgs; }).pulsar;
  log4j2 = import ../../nix/log4j2.nix { inherit pkgs; } "pulsar" "%d{ISO8601} %-5p [%t] %c{1} - %m%n";
  flags = builtins.concatStringsSep " " [
    "-Djute.maxbuffer=10485760"
    "-Djava.net.preferIPv4Stack=true"
    "-Dio.netty.tryReflectionSetAccessible=true"
    "--add-opens=java.base/java.io=ALL-UNNAMED"
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED"
    "--add-opens=java.base/java.nio=ALL-UNNAMED"
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED"
    "--add-opens=java.base/sun.net=ALL-UNNAMED"
    "--add-opens=java.management/sun.management=ALL-UNNAMED"
    "-Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver"
    "-Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver"
    "-Dlog4j.shutdownHookEnabled=false"
    "-Dlog4j2.configurationFile=${log4j2}"
  ];
  java = heap: "java ${heap} ${flags} -cp '${pulsar}/lib/*'";
in
{
  mqlab.node = {
    broker = "pulsar";
    package = pulsar;
    version = pulsar.version;
    ports = [ 6650 8080 2181 2888 3888 3181 ];
    runtimeInputs = [ pkgs.jdk17_headless ];
    settings = {
      managedLedgerDefaultEnsembleSize = 3;
      managedLedgerDefaultWriteQuorum = 3;
      managedLedgerDefaultAckQuorum = 2;
      brokerDeduplicationEnabled = false;
      allowAutoTopicCreation = false; # the driver creates its topic (admin REST API)
    };
    services.mqlab-pulsar-zookeeper = ''
      mkdir -p /var/lib/mqlab/pulsar/zookeeper
      cp /run/mqlab/conf/myid /var/lib/mqlab/pulsar/zookeeper/myid
      exec ${java "-Xmx512m"} org.apache.zookeeper.server.quorum.QuorumPeerMain \
        /run/mqlab/conf/zookeeper.conf
    '';
    services.mqlab-pulsar-bookie = ''
      exec ${java "-Xmx1g -XX:MaxDirectMemorySize=1g"} org.apache.bookkeeper.server.Main \
        --conf /run/mqlab/conf/bookkeeper.conf
    '';
    # node 0 registers the cluster (and BookKeeper's ledger layout) once, when ZooKeeper
    # has its quorum; bookies and brokers fail and are restarted until then
    services.mqlab-pulsar-broker = ''
      args=/run/mqlab/conf/cluster-metadata.args
      done=/var/lib/mqlab/pulsar/cluster-metadata.done
      if [ -f "$args" ] && [ ! -f "$done" ]; then
        mapfile -t init < "$args"
        ${java "-Xmx512m"} org.apache.pulsar.PulsarClusterMetadataSetup "''${init[@]}"
        touch "$done"
      fi
      exec ${java "-Xmx2g -XX:MaxDirectMemorySize=2g"} org.apache.pulsar.PulsarBrokerStarter \
        --broker-conf /run/mqlab/conf/broker.conf
    '';
  };
}
