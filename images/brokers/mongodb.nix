# MongoDB as a queue: a 3-member replica set; writes default to majority with
# journaling (setDefaultRWConcern, run once by node 0 after all members are up).
#
# The release is pinned here, not left to whichever mongodb-ce the pinned nixpkgs
# carries: nixpkgs' own recipe (autoPatchelf of MongoDB's prebuilt tarball) with this
# version and tarball. Version, URL and hash are those of nixpkgs' recipe
# pkgs/by-name/mo/mongodb-ce/package.nix at NixOS/nixpkgs commit
# 008d49507f92505b05a17d73e152131cfbdc5a60 (x86_64-linux, the AMIs' system).
#
# Licence: MongoDB Community Server is under the SSPL, which nixpkgs marks unfree, so
# evaluating this image needs nixpkgs' unfree packages allowed for "mongodb-ce":
# flake.nix's `unfree` list (allowUnfreePredicate) does it. mongosh is Apache-2.0.
{ pkgs, ... }:
let
  mongo = pkgs.mongodb-ce.overrideAttrs (_old: {
    version = "8.2.6";
    src = pkgs.fetchurl {
      url = "https://fastdl.mongodb.org/linux/mongodb-linux-x86_64-ubuntu2404-8.2.6.tgz";
      hash = "sha256-VjFKDwqBI42XQwL7/+eGLv6WlMSY6tYqC8qSy1laDfA=";
    };
  });
in
{
  mqlab.node = {
    broker = "mongodb";
    package = mongo;
    version = mongo.version;
    ports = [ 27017 ];
    runtimeInputs = [ mongo pkgs.mongosh ];
    settings = {
      replSetName = "mqlab";
      defaultWriteConcern = "majority";
      "mqlab.members" = 3;
    };
    services.mqlab-mongodb = ''
      mkdir -p /var/lib/mqlab/mongodb
      exec mongod --config /run/mqlab/conf/mongod.conf
    '';
    services.mqlab-mongodb-init = ''
      [ "$MQLAB_INDEX" = 0 ] || exec sleep infinity
      for ip in $MQLAB_PEERS; do until mongosh --quiet --host "$ip" --eval 'db.runCommand({ping: 1})'; do sleep 2; done; done
      mongosh --quiet --eval 'rs.status().ok' | grep -q 1 || mongosh --quiet /run/mqlab/conf/init.js
      exec sleep infinity
    '';
  };
}
