# Redis Streams: node 0 primary, nodes 1 and 2 replicas (replicaof), AOF on; a Redis
# Sentinel on every node (port 26379, quorum 2) fails the primary over.
{ pkgs, ... }:
let redis = pkgs.redis; in
{
  mqlab.node = {
    broker = "redis";
    package = redis;
    version = redis.version;
    ports = [ 6379 26379 ];
    runtimeInputs = [ redis ];
    settings = {
      appendonly = true;
      appendfsync = "always";
      "mqlab.replicas" = 2; # primary + 2 replicas; the driver waits with WAIT
      "repl-diskless-sync" = true;
      "min-replicas-max-lag" = 10;
    };
    services.mqlab-redis = ''
      mkdir -p /var/lib/mqlab/redis
      exec redis-server /run/mqlab/conf/redis.conf
    '';
    # Sentinel rewrites its config file (it holds its state: the primary of now, the
    # epochs): copied once to the data volume, then kept across restarts
    services.mqlab-redis-sentinel = ''
      mkdir -p /var/lib/mqlab/redis
      [ -e /var/lib/mqlab/redis/sentinel.conf ] || cp /run/mqlab/conf/sentinel.conf /var/lib/mqlab/redis/sentinel.conf
      exec redis-server /var/lib/mqlab/redis/sentinel.conf --sentinel
    '';
  };
}
