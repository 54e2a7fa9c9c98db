# MongoDB as a queue: a 3-member replica set; writes default to majority with
# journaling (setDefaultRWConcern, run once by node 0 after all members are up).
{ pkgs, ... }:
let mongo = pkgs.mongodb-ce; in
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
