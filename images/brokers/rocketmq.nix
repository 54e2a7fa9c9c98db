# Apache RocketMQ in DLedger mode: a name server and a broker on each of the 3
# nodes; the commit log is replicated by Raft across the 3 brokers, flushed
# synchronously. Package: upstream release, NOT PINNED yet (nix/upstream.nix).
{ pkgs, ... }:
let rocketmq = (import ../../nix/upstream.nix { inherit pkgs; }).rocketmq; in
{
  mqlab.node = {
    broker = "rocketmq";
    package = rocketmq;
    version = rocketmq.version;
    ports = [ 9876 10911 10909 40911 ];
    runtimeInputs = [ rocketmq pkgs.jdk17_headless ];
    settings = {
      enableDLegerCommitLog = true;
      flushDiskType = "SYNC_FLUSH";
      brokerRole = "ASYNC_MASTER"; # ignored in DLedger mode; replication is Raft
      autoCreateTopicEnable = false;
    };
    services.mqlab-rocketmq-namesrv = ''
      exec mqnamesrv
    '';
    services.mqlab-rocketmq-broker = ''
      exec mqbroker -c /run/mqlab/conf/broker.conf
    '';
  };
}
