# Apache RocketMQ in DLedger mode: on each of the 3 nodes a name server and a broker
# whose commit log is one Raft group over the 3 brokers (a send is answered once a
# majority appended it), with the gRPC proxy in the broker's process (the proxy's local
# mode: what mqlab's driver connects to). Settings as mqperf 2021 ran RocketMQ
# (softwaremill/mqperf, ansible/roles/rocketmq/files/master_1.properties:
# brokerRole=SYNC_MASTER, flushDiskType=ASYNC_FLUSH): replication synchronous (here
# DLedger's majority; brokerRole does not apply in DLedger mode), flushing asynchronous.
# Package: the server mqlab runs locally, from the same Maven Central jars and sha256s
# (nix/servers.nix, mqlab/brokers/servers.lock.json), started by its main classes with
# the JVM flags of mqlab's local cluster (mqlab/brokers/rocketmq/cluster.py).
{ pkgs, ... }:
let
  rocketmq = (import ../../nix/servers.nix { inherit pkgs; }).rocketmq;
  home = "/var/lib/mqlab/rocketmq";
  flags = b: "-Xms${b} -Xmx${b} -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow"
    + " --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED"
    + " --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-exports=java.base/jdk.internal.ref=ALL-UNNAMED";
  java = what: heap: ''
    mkdir -p ${home}/${what}
    export ROCKETMQ_HOME=${home}/${what}
    exec java ${flags heap} -Duser.home=${home}/${what} -Drocketmq.home.dir=${home}/${what} \
      -cp '${rocketmq}/lib/*' '';
in
{
  mqlab.node = {
    broker = "rocketmq";
    package = rocketmq;
    version = rocketmq.version;
    ports = [ 9876 10911 10909 40911 8081 8080 ];
    runtimeInputs = [ pkgs.jdk17_headless ];
    settings = {
      flushDiskType = "ASYNC_FLUSH";
      autoCreateTopicEnable = false;
      autoCreateSubscriptionGroup = true;
      "mqlab.dledger_peers" = 3;
    };
    services.mqlab-rocketmq-namesrv = java "namesrv" "1g" + ''
      org.apache.rocketmq.namesrv.NamesrvStartup -c /run/mqlab/conf/namesrv.conf
    '';
    # the broker and its proxy: ProxyStartup in local mode starts the broker itself
    services.mqlab-rocketmq-broker = java "broker" "2g" + ''
      org.apache.rocketmq.proxy.ProxyStartup -pm local \
        -bc /run/mqlab/conf/broker.conf -pc /run/mqlab/conf/rmq-proxy.json
    '';
  };
}
