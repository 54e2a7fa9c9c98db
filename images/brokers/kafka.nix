# Apache Kafka, 3 nodes in KRaft mode (each node broker + controller, no ZooKeeper).
# Package: the server mqlab runs locally, from the same Maven Central jars and sha256s
# (nix/servers.nix, mqlab/brokers/servers.lock.json), started by its main classes as
# mqlab's local cluster starts it (mqlab/brokers/kafka/cluster.py).
{ pkgs, ... }:
let
  kafka = (import ../../nix/servers.nix { inherit pkgs; }).kafka;
  log4j2 = import ../../nix/log4j2.nix { inherit pkgs; } "kafka" "[%d] %p %m (%c)%n";
  java = "java -Dlog4j2.configurationFile=${log4j2} -cp '${kafka}/lib/*'";
in
{
  mqlab.node = {
    broker = "kafka";
    package = kafka;
    version = kafka.version;
    ports = [ 9092 9093 ];
    runtimeInputs = [ pkgs.jdk17_headless ];
    settings = {
      "process.roles" = "broker,controller";
      "controller.listener.names" = "CONTROLLER";
      "listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT";
      "inter.broker.listener.name" = "PLAINTEXT";
      "default.replication.factor" = 3;
      "min.insync.replicas" = 2;
      "offsets.topic.replication.factor" = 3;
      "transaction.state.log.replication.factor" = 3;
      "transaction.state.log.min.isr" = 2;
      "unclean.leader.election.enable" = false;
      "auto.create.topics.enable" = false;
    };
    services.mqlab-kafka = ''
      conf=/run/mqlab/conf/server.properties
      logdir=$(sed -n 's/^log.dirs=//p' "$conf")
      if [ ! -f "$logdir/meta.properties" ]; then
        ${java} -Xmx512m kafka.tools.StorageTool format -t "$(cat /run/mqlab/conf/cluster-id)" -c "$conf"
      fi
      exec ${java} -Xms1g -Xmx1g -XX:+UseG1GC kafka.Kafka "$conf"
    '';
  };
}
