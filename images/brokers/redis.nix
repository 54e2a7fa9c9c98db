# Redis Streams: node 0 primary, nodes 1 and 2 replicas (replicaof), AOF on.
{ pkgs, ... }:
let redis = pkgs.redis; in
{
  mqlab.node = {
    broker = "redis";
    package = redis;
    version = redis.version;
    ports = [ 6379 ];
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
  };
}
