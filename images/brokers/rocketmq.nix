# Apache RocketMQ 5.3.1 in DLedger mode: on each of the 3 nodes a name server and a
# broker whose commit log is one Raft group over the 3 brokers (a send is answered
# once a majority appended it), with the gRPC proxy in the broker's process (the
# proxy's local mode: what mqlab's driver connects to). Settings as mqperf 2021 ran
# RocketMQ (softwaremill/mqperf, ansible/roles/rocketmq/files/master_1.properties:
# brokerRole=SYNC_MASTER, flushDiskType=ASYNC_FLUSH): replication synchronous (here
# DLedger's majority; brokerRole does not apply in DLedger mode), flushing asynchronous.
# Package: the upstream release, pinned in nix/upstream.nix with the hash of Spack's recipe.
{ pkgs, ... }:
let
  rocketmq = (import ../../nix/upstream.nix { inherit pkgs; }).rocketmq;
  java = "export JAVA_HOME=${pkgs.jdk17_headless} ROCKETMQ_HOME=${rocketmq}";
in
{
  mqlab.node = {
    broker = "rocketmq";
    package = rocketmq;
    version = rocketmq.version;
    ports = [ 9876 10911 10909 40911 8081 8080 ];
    runtimeInputs = [ rocketmq pkgs.jdk17_headless pkgs.gawk pkgs.gnused pkgs.gnugrep pkgs.procps ];
    settings = {
      flushDiskType = "ASYNC_FLUSH";
      autoCreateTopicEnable = false;
      autoCreateSubscriptionGroup = true;
      "mqlab.dledger_peers" = 3;
    };
    services.mqlab-rocketmq-namesrv = ''
      ${java} JAVA_OPT_EXT="-Xms1g -Xmx1g -Xmn512m"
      exec sh ${rocketmq}/bin/runserver.sh org.apache.rocketmq.namesrv.NamesrvStartup -c /run/mqlab/conf/namesrv.conf
    '';
    # the broker and its proxy: ProxyStartup in local mode starts the broker itself
    services.mqlab-rocketmq-broker = ''
      ${java} JAVA_OPT_EXT="-Drmq.logback.configurationFile=${rocketmq}/conf/rmq.proxy.logback.xml"
      exec sh ${rocketmq}/bin/runserver.sh org.apache.rocketmq.proxy.ProxyStartup -pm local \
        -bc /run/mqlab/conf/broker.conf -pc /run/mqlab/conf/rmq-proxy.json
    '';
  };
}
