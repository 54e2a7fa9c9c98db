# Broker releases that nixpkgs does not package. Each must be fetched with a
# hash we can source; none could be sourced where this file was written, so
# they are NOT PINNED yet: the package evaluates (the image's configuration
# and tests work) but building it stops with this message. To pin one, put the
# release's SRI hash (from `nix store prefetch-file URL`, checked against the
# Apache .sha512 file) into `hash` and replace the body with a real build.
{ pkgs }:
let
  release = { pname, version, url, hash ? null }:
    if hash == null then
      pkgs.runCommand "${pname}-${version}-not-pinned" { } ''
        echo "${pname} ${version} is not pinned yet: add the hash of ${url} to nix/upstream.nix" >&2
        exit 1
      '' // { inherit pname version url; pinned = false; }
    else
      pkgs.stdenvNoCC.mkDerivation {
        inherit pname version;
        src = pkgs.fetchurl { inherit url hash; };
        installPhase = "mkdir -p $out && cp -r . $out/";
        passthru = { inherit url; pinned = true; };
      };
in
{
  pulsar = release {
    pname = "apache-pulsar";
    version = "4.0.0";
    url = "https://archive.apache.org/dist/pulsar/pulsar-4.0.0/apache-pulsar-4.0.0-bin.tar.gz";
  };
  artemis = release {
    pname = "apache-artemis";
    version = "2.38.0";
    url = "https://archive.apache.org/dist/activemq/activemq-artemis/2.38.0/apache-artemis-2.38.0-bin.tar.gz";
  };
  rocketmq = release {
    pname = "rocketmq";
    version = "5.3.1";
    url = "https://archive.apache.org/dist/rocketmq/5.3.1/rocketmq-all-5.3.1-bin-release.zip";
  };
}
