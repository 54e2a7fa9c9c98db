# ActiveMQ Artemis: node 0 the live server, nodes 1 and 2 its backups (HA policy
# "replication", one group; the live server replicates to one backup at a time, the other
# waits), a static cluster connection (mqlab.brokers.artemis.node renders broker.xml).
# Journal as mqperf 2021 ran Artemis 2.15 (its "configuration changes": journal-type
# MAPPED; journal-datasync, journal-sync-non-transactional and journal-sync-transactional
# false): a message counts as stored once it is in the live server's journal and the
# replicating backup has it, neither fsynced. mqperf also set the heap and global-max-size
# to 48G for its machines; this image keeps `artemis create`'s defaults.
# Package: the distribution mqlab runs locally, the same archive and sha256 from Maven
# Central (nix/servers.nix, mqlab/brokers/servers.lock.json). The driver talks STOMP on
# the one acceptor (port 61616).
{ pkgs, ... }:
let
  artemis = (import ../../nix/servers.nix { inherit pkgs; }).artemis;
  cli = "${artemis}/dist/apache-artemis-${artemis.version}/bin/artemis";
in
{
  mqlab.node = {
    broker = "artemis";
    package = artemis;
    version = artemis.version;
    ports = [ 61616 8161 ];
    runtimeInputs = [ artemis pkgs.jdk17_headless ];
    settings = {
      persistence-enabled = true;
      journal-type = "MAPPED";
      journal-datasync = false;
      journal-sync-transactional = false;
      journal-sync-non-transactional = false;
    };
    services.mqlab-artemis = ''
      export JAVA_HOME=${pkgs.jdk17_headless}
      inst=/var/lib/mqlab/artemis/instance
      [ -d "$inst" ] || ${cli} create --silent --user mqlab --password mqlab --allow-anonymous "$inst"
      cp /run/mqlab/conf/broker.xml "$inst/etc/broker.xml"
      exec "$inst/bin/artemis" run
    '';
  };
}
