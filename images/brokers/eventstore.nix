# EventStoreDB (KurrentDB's name before 25.0; nixpkgs has no kurrentdb): a 3-node
# cluster found by gossip seeds (the peers' IPs, mqlab/brokers/eventstore/node.py). A write
# is acknowledged once a majority of the nodes has it (the server's fixed quorum rule:
# 2 of 3); the nodes flush their log to disk (UnsafeDisableFlushToDisk = false, the
# default, stated here so the image says it).
#
# The release is pinned here, not left to whichever eventstore the pinned nixpkgs
# carries: nixpkgs' own recipe (buildDotnetModule from the GitHub tag) with this version
# and source. Version, tag and hash are those of nixpkgs' recipe
# pkgs/by-name/ev/eventstore/package.nix at NixOS/nixpkgs commit
# 1c27c1c414490bf43e1ce8d284a70e284edcdf06. The recipe's NuGet lock (deps.json) stays
# the pinned nixpkgs' own: it must be this release's, which only a real build proves
# (nix flake check on a networked machine); if nixpkgs moved on, take that commit's
# deps.json with it. Its program is EventStore.ClusterNode; licence BSD-3 in nixpkgs.
{ pkgs, ... }:
let
  version = "24.10.6";
  es = pkgs.eventstore.overrideAttrs (_old: {
    inherit version;
    src = pkgs.fetchFromGitHub {
      owner = "EventStore";
      repo = "EventStore";
      tag = "v${version}";
      hash = "sha256-8/sagvMyJ1/onGMuJ28QLWI5M8dBDWyGOcZKUv3PJsQ=";
      leaveDotGit = true;
    };
    MINVERVERSIONOVERRIDE = version; # else the server reports version 0.0.0.0
  });
in
{
  mqlab.node = {
    broker = "eventstore";
    package = es;
    version = es.version;
    ports = [ 2113 1112 ]; # NodePort (HTTP, gRPC, gossip), ReplicationPort
    runtimeInputs = [ es ];
    settings = {
      Insecure = true; # lab VPC only: no TLS certificates to distribute, no users
      RunProjections = "None";
      SkipDbVerify = false;
      UnsafeDisableFlushToDisk = false;
      "mqlab.quorum" = 2; # what the eventstore-r3 profile expects: majority of 3
    };
    services.mqlab-eventstore = ''
      exec EventStore.ClusterNode --config /run/mqlab/conf/eventstore.conf
    '';
  };
}
