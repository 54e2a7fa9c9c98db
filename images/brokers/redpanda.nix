# Redpanda, 3 nodes (Raft per partition); topics default to 3 replicas.
{ pkgs, ... }:
let rp = pkgs.redpanda-server; in
{
  mqlab.node = {
    broker = "redpanda";
    package = rp;
    version = rp.version;
    ports = [ 9092 33145 9644 ];
    runtimeInputs = [ rp ];
    # cluster properties (written to .bootstrap.yaml, applied on first start)
    settings = {
      default_topic_replications = 3;
      internal_topic_replication_factor = 3;
      auto_create_topics_enabled = false;
      write_caching_default = "false"; # acks=all waits for fsync on a majority
    };
    services.mqlab-redpanda = ''
      mkdir -p "$(dirname /run/mqlab/conf)/redpanda-home"
      exec redpanda --redpanda-cfg /run/mqlab/conf/redpanda.yaml --overprovisioned=false
    '';
  };
}
