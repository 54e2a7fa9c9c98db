# EventStoreDB (KurrentDB's predecessor as packaged in nixpkgs): a 3-node
# cluster with gossip seeds from the peers' IPs; a write is acknowledged once
# a majority has it on disk (the server's fixed quorum rule).
{ pkgs, ... }:
let es = pkgs.eventstore; in
{
  mqlab.node = {
    broker = "eventstore";
    package = es;
    version = es.version;
    ports = [ 2113 1112 ];
    runtimeInputs = [ es ];
    settings = {
      Insecure = true; # lab VPC only: no TLS certificates to distribute
      RunProjections = "None";
      SkipDbVerify = false;
      UnsafeDisableFlushToDisk = false;
    };
    services.mqlab-eventstore = ''
      exec eventstored --config /run/mqlab/conf/eventstore.conf
    '';
  };
}
