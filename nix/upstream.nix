# Broker releases that nixpkgs does not package. Each must be fetched with a
# hash we can source from a published recipe (named beside it). One without a
# hash is NOT PINNED yet: the package evaluates (the image's configuration
# and tests work) but building it stops with this message. To pin one, put the
# release's SRI hash into `hash` (from a published recipe, or from
# `nix store prefetch-file URL` checked against the Apache .sha512 file).
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
        nativeBuildInputs = [ pkgs.unzip ]; # unpacks .zip releases (RocketMQ's)
        installPhase = "mkdir -p $out && cp -r . $out/";
        passthru = { inherit url; pinned = true; };
      };
in
{
  # Pulsar 3.0.1 (the 3.0 LTS line), binary release. Hash: the SHA-512 published for this
  # tarball in the Pulsar distribution table of visortelle/dekaf (file
  # desktop/electron/src/main/api/local-pulsar-distributions/versions.ts), in SRI form.
  # Homebrew's apache-pulsar formula pins only the source tarball, which needs a Maven
  # build with network access. Not built here (no network): fetchurl checks the hash.
  pulsar = release {
    pname = "apache-pulsar";
    version = "3.0.1";
    url = "https://archive.apache.org/dist/pulsar/pulsar-3.0.1/apache-pulsar-3.0.1-bin.tar.gz";
    hash = "sha512-uNjAr+mSPb8cOt/b2rzrjTNvLLD+mdYFeRPyiSs0aV7iZt5lVLbVCrSa9UIE+sHeamfuKyC8ISfbrecDS/Zp9Q==";
  };
  # ActiveMQ Artemis 2.27.1, binary release. Hash: the sha256 that the apache-artemis recipe
  # of the datava-admins/nixpkgs fork gives for this tarball (file
  # pkgs/development/libraries/apache-artemis/default.nix at commit
  # 7bf4ce92e6f90972dbb19ed2230067b0fa9b901f, fetched there from mirror://apache). The
  # only published recipe with a hash for an Artemis release found where this was written
  # (NixOS/nixpkgs packages ActiveMQ 5 only; Homebrew's artemis formula was not among the
  # sources). Hence 2.27.1, not a newer release. Not built here (no network): fetchurl
  # checks the hash.
  artemis = release {
    pname = "apache-artemis";
    version = "2.27.1";
    url = "https://archive.apache.org/dist/activemq/activemq-artemis/2.27.1/apache-artemis-2.27.1-bin.tar.gz";
    hash = "sha256-8MElmDIbuXm/b/e2m15mziMMP5PO2WkLTu0Rwl+K8uI=";
  };
  # The sha256 of this zip as Spack's recipe has it (spack/spack-packages,
  # repos/spack_repo/builtin/packages/rocketmq/package.py, version 5.3.1:
  # 251d7261fa26d35eaffef6a2fce30880054af7a5883d578dd31574bf908a8b97), in SRI form.
  rocketmq = release {
    pname = "rocketmq";
    version = "5.3.1";
    url = "https://archive.apache.org/dist/rocketmq/5.3.1/rocketmq-all-5.3.1-bin-release.zip";
    hash = "sha256-JR1yYfom016v/vai/OMIgAVK96WIPVeN0xV0v5CKi5c=";
  };
}
