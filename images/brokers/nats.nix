# NATS with JetStream, 3-node cluster; mqlab's streams use 3 replicas (R3),
# file storage, fsync on every write.
{ pkgs, ... }:
let nats = pkgs.nats-server; in
{
  mqlab.node = {
    broker = "nats";
    package = nats;
    version = nats.version;
    ports = [ 4222 6222 8222 ];
    runtimeInputs = [ nats ];
    settings = {
      "mqlab.jetstream" = true;
      "jetstream.sync_interval" = "always";
      "mqlab.stream_replicas" = 3; # the replication factor mqlab's profile asks of streams
      "mqlab.storage" = "file";
    };
    services.mqlab-nats = ''
      exec nats-server -c /run/mqlab/conf/nats.conf
    '';
  };
}
