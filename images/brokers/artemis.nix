# ActiveMQ Artemis: node 0 primary, nodes 1 and 2 replicating backups (HA
# policy "replication", one group), a static cluster connection; the journal
# syncs both transactional and non-transactional writes.
# Package: upstream release, NOT PINNED yet (nix/upstream.nix).
{ pkgs, ... }:
let artemis = (import ../../nix/upstream.nix { inherit pkgs; }).artemis; in
{
  mqlab.node = {
    broker = "artemis";
    package = artemis;
    version = artemis.version;
    ports = [ 61616 8161 ];
    runtimeInputs = [ artemis pkgs.jdk17_headless ];
    settings = {
      persistence-enabled = true;
      journal-type = "ASYNCIO";
      journal-sync-transactional = true;
      journal-sync-non-transactional = true;
    };
    services.mqlab-artemis = ''
      inst=/var/lib/mqlab/artemis/instance
      [ -d "$inst" ] || artemis create --silent --user mqlab --password mqlab --allow-anonymous "$inst"
      cp /run/mqlab/conf/broker.xml "$inst/etc/broker.xml"
      exec "$inst/bin/artemis" run
    '';
  };
}
