# Client nodes (senders and receivers): mqlab's worker closure, nothing else
# listening. Fabric starts workers over SSH (mqlab-worker is on PATH).
{ pkgs, mqlabWorker, ... }:
{
  mqlab.node = {
    broker = "client";
    role = "client";
    package = mqlabWorker;
    version = "none";
    ports = [ ];
  };
  environment.systemPackages = [ mqlabWorker ];
}
