# RabbitMQ, 3-node cluster (classic_config peer discovery by IP, long node names);
# queues default to quorum queues (Raft, 3 replicas).
{ pkgs, ... }:
let rmq = pkgs.rabbitmq-server; in
{
  mqlab.node = {
    broker = "rabbitmq";
    package = rmq;
    version = rmq.version;
    ports = [ 5672 25672 4369 15672 ];
    runtimeInputs = [ rmq ];
    settings = {
      default_queue_type = "quorum";
      cluster_partition_handling = "pause_minority";
      "cluster_formation.target_cluster_size_hint" = 3;
    };
    services.mqlab-rabbitmq = ''
      export HOME=/var/lib/mqlab/rabbitmq
      mkdir -p "$HOME"
      install -m 0400 /run/mqlab/conf/erlang.cookie "$HOME/.erlang.cookie"
      export RABBITMQ_CONFIG_FILE=/run/mqlab/conf/rabbitmq.conf
      export RABBITMQ_CONF_ENV_FILE=/run/mqlab/conf/rabbitmq-env.conf
      export RABBITMQ_MNESIA_BASE=$HOME/mnesia RABBITMQ_LOG_BASE=$HOME/log
      exec rabbitmq-server
    '';
  };
}
