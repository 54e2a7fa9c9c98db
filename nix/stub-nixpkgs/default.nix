# Stub `pkgs` for evaluation tests: every package is an attribute set with a
# fake store path; builders record their arguments under `stubArgs` so tests
# can inspect what the flake asked for. Names listed here are the nixpkgs
# attribute names mqlab uses; whether they exist in the pinned nixpkgs is only
# proven by a real evaluation (nix flake check) on a networked machine.
{ system ? "x86_64-linux", config ? { }, overlays ? [ ], ... }:
let
  b = builtins;
  lib = import ./lib.nix;
  mk = name: version: {
    type = "derivation";
    inherit name version system;
    pname = name;
    outPath = "/nix/store/00000000000000000000000000000000-${name}";
    drvPath = "/nix/store/00000000000000000000000000000000-${name}.drv";
    meta = { mainProgram = name; };
    # the one-argument form (prevAttrs: { ... }); what it changed is kept under stubOverride
    overrideAttrs = f: let changed = f (mk name version); in
      mk name (changed.version or version) // changed // { stubOverride = changed; };
  };
  withArgs = name: version: args: mk name version // { stubArgs = args; } // (args.passthru or { });
  named = names: lib.genAttrs names (n: mk n "stub");

  pythonPackages = named [
    "click" "rich" "numpy" "pyroaring" "pyspark" "duckdb" "pyarrow" "matplotlib" "nats-py"
    "psycopg" "redis" "hiredis" "pika" "confluent-kafka" "boto3" "pymongo" "pulsar-client" "fabric" "moto"
    "hatchling" "setuptools" "pbr" "pytest"
    "grpcio" "grpcio-tools" "grpcio-status" "protobuf" "opentelemetry-api" "opentelemetry-sdk"
    "opentelemetry-exporter-otlp" "poetry-core" "googleapis-common-protos" "typing-extensions"
  ] // {
    buildPythonApplication = a: withArgs a.pname a.version a;
    buildPythonPackage = a: withArgs a.pname a.version a;
  };
  python3 = mk "python3" "3.13.0" // {
    pkgs = pythonPackages;
    withPackages = f: withArgs "python3-env" "3.13.0" { packages = f pythonPackages; };
  };
in
named [
  "apacheKafka" "redpanda-server" "rabbitmq-server" "nats-server" "redis" "postgresql_17"
  "mongodb-ce" "mongosh" "eventstore" "jdk17_headless" "jdk17" "terraform" "uv" "awscli2" "chrony"
  "jq" "curl" "xfsprogs" "util-linux" "coreutils" "gnugrep" "gnused" "gnutar" "gzip" "iproute2"
  "procps" "sysstat" "git" "openssl" "bash" "findutils" "ruff" "nix" "e2fsprogs" "hostname"
  "gawk" "unzip"
]
// {
  inherit lib system python3;
  python3Minimal = mk "python3-minimal" "3.13.0";
  stubPackage = mk;
  fetchurl = a: withArgs (b.baseNameOf a.url) "" a;
  fetchFromGitHub = a: withArgs "source" "" a;
  writeText = name: text: withArgs name "" { inherit text; };
  writeShellScript = name: text: withArgs name "" { inherit text; };
  writeScript = name: text: withArgs name "" { inherit text; };
  writeShellApplication = a: withArgs a.name "" a;
  runCommand = name: env: script: withArgs name "" { inherit env script; };
  symlinkJoin = a: withArgs a.name "" a;
  mkShell = a: withArgs "nix-shell" "" a;
  closureInfo = a: withArgs "closure-info" "" a;
  stdenv = { mkDerivation = a: withArgs (a.pname or a.name) (a.version or "") a; };
  stdenvNoCC = { mkDerivation = a: withArgs (a.pname or a.name) (a.version or "") a; };
}
