# Apache Kafka, 3 nodes in KRaft mode (each node broker + controller, no ZooKeeper).
{ pkgs, ... }:
let kafka = pkgs.apacheKafka; in
{
  mqlab.node = {
    broker = "kafka";
    package = kafka;
    version = kafka.version;
    ports = [ 9092 9093 ];
    runtimeInputs = [ kafka pkgs.jdk17_headless ];
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
        kafka-storage.sh format -t "$(cat /run/mqlab/conf/cluster-id)" -c "$conf"
      fi
      exec kafka-server-start.sh "$conf"
    '';
  };
}
