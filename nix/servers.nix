# The servers mqlab fetches from Maven Central at set-up (mqlab/brokers/servers.toml),
# made of the same files: each one fetched from Maven Central by the path and sha256 that
# mqlab/brokers/servers.lock.json records, so an image runs the bits a local cluster runs
# (same versions, same jars). `lib/` holds a server's class path (its jars, as mqlab's
# `servers.classpath`: "${pkg}/lib/*"), `dist/` its unpacked distribution archive
# (Artemis), `archive/` that archive. Not built
# where this was written (nixpkgs cannot be fetched there): fetchurl checks each sha256.
{ pkgs }:
let
  b = builtins;
  lock = b.fromJSON (b.readFile ../mqlab/brokers/servers.lock.json);
  central = "https://repo1.maven.org/maven2/";
  server = name:
    let
      entry = lock.${name};
      files = b.mapAttrs
        (rel: sha256: pkgs.fetchurl { url = central + entry.maven.${rel}; inherit sha256; })
        entry.files;
      links = b.concatStringsSep "\n" (b.map (rel: "ln -s ${files.${rel}} $out/${rel}") (b.attrNames files));
    in
    pkgs.stdenvNoCC.mkDerivation {
      pname = name;
      inherit (entry) version;
      buildCommand = ''
        mkdir -p $out/lib $out/archive
        ${links}
        for a in $out/archive/*.tar.gz; do
          [ -e "$a" ] || continue
          mkdir -p $out/dist
          tar -xzf "$a" -C $out/dist
        done
      '';
      passthru = { inherit files; };
    };
in
b.listToAttrs (b.map (n: { name = n; value = server n; }) [ "kafka" "artemis" "pulsar" "rocketmq" "zookeeper" ])
