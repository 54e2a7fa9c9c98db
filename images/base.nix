# Shared base of every mqlab image (brokers and client nodes).
#
# - SSH only for the lab key: NixOS' EC2 support installs the instance's key
#   pair (Terraform `key_name`) into root's authorized_keys; passwords are off.
# - Nothing listens publicly except SSH: the firewall opens port 22 to all and
#   the broker's ports (mqlab.node.ports) only to private (VPC) address ranges.
# - Time: chrony against the Amazon Time Sync Service (169.254.169.123).
# - Data: the instance's extra EBS volume is formatted (XFS, first boot only)
#   and mounted at mqlab.node.dataDir before the broker starts.
# - Node identity: mqlab-node.service reads EC2 user data (docs/node-bootstrap.md)
#   into /run/mqlab/node.json and node.env; broker services render their
#   configuration from it (images/scripts/mqlab_node.py over mqlab/brokers).
# - /etc/mqlab/broker.json names the broker, its version and the flake and
#   nixpkgs revisions, for mqlab's run manifest.
{ config, lib, pkgs, modulesPath, mqlabProvenance, ... }:
let
  cfg = config.mqlab.node;
  # the boot script and mqlab.brokers.nodeconf (every broker's node configuration, the
  # same code local clusters render with) side by side: mqlab_node.py imports
  # mqlab.brokers.nodeconf from its own directory (a namespace package: no mqlab/__init__.py)
  nodeconfSrc = builtins.path {
    name = "mqlab-nodeconf";
    path = ../mqlab/brokers;
    filter = path: type: baseNameOf path != "__pycache__" && !(lib.hasSuffix ".pyc" path);
  };
  nodeToolDir = pkgs.runCommand "mqlab-node-tool" { } ''
    mkdir -p $out/mqlab
    cp ${./scripts/mqlab_node.py} $out/mqlab_node.py
    cp -r ${nodeconfSrc} $out/mqlab/brokers
  '';
  nodeTool = pkgs.writeShellScript "mqlab-node" ''
    exec ${pkgs.python3}/bin/python3 ${nodeToolDir}/mqlab_node.py "$@"
  '';
  brokerJson = {
    format_version = 1;
    broker = cfg.broker;
    role = cfg.role;
    version = cfg.version;
    package = if cfg.package == null then null else "${cfg.package}";
    data_dir = cfg.dataDir;
    ports = cfg.ports;
    settings = cfg.settings;
    flake_rev = mqlabProvenance.flakeRev;
    nixpkgs_rev = mqlabProvenance.nixpkgsRev;
  };
  firewallRules = lib.concatStringsSep "\n" (lib.concatMap
    (cidr: map (port: "iptables -A nixos-fw -p tcp -s ${cidr} --dport ${toString port} -j nixos-fw-accept") cfg.ports)
    cfg.privateCidrs);
  serviceBase = {
    after = [ "mqlab-node.service" "mqlab-data-volume.service" "network-online.target" ];
    requires = [ "mqlab-node.service" "mqlab-data-volume.service" ];
    wants = [ "network-online.target" ];
    wantedBy = [ "multi-user.target" ];
    path = cfg.runtimeInputs ++ [ pkgs.coreutils pkgs.bash ];
    serviceConfig = {
      EnvironmentFile = "/run/mqlab/node.env";
      User = cfg.user;
      Group = cfg.user;
      LimitNOFILE = 1048576;
      Restart = "on-failure";
      RestartSec = 5;
    };
  };
in
{
  # system.build.amazonImage (the AMI disk image) is defined by this module of
  # nixpkgs, which also imports nixos/modules/virtualisation/amazon-image.nix
  imports = [ "${toString modulesPath}/../maintainers/scripts/ec2/amazon-image.nix" ];

  options.mqlab.node = {
    broker = lib.mkOption { type = lib.types.str; description = "Broker id from mqlab's registry, or \"client\"."; };
    role = lib.mkOption { type = lib.types.enum [ "broker" "client" ]; default = "broker"; description = "What this image runs."; };
    package = lib.mkOption { type = lib.types.nullOr lib.types.package; default = null; description = "The broker's package."; };
    version = lib.mkOption { type = lib.types.str; default = "none"; description = "The broker's version, as recorded in run manifests."; };
    ports = lib.mkOption { type = lib.types.listOf lib.types.port; default = [ ]; description = "TCP ports open to private ranges only."; };
    privateCidrs = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      default = [ "10.0.0.0/8" "172.16.0.0/12" "192.168.0.0/16" ];
      description = "Source ranges allowed to reach the broker ports (the lab VPC lies inside them).";
    };
    settings = lib.mkOption { type = lib.types.attrsOf lib.types.anything; default = { }; description = "The broker's durability settings (mqlab's profile), rendered into its config at boot."; };
    dataDir = lib.mkOption { type = lib.types.str; default = "/var/lib/mqlab"; description = "Mount point of the EBS data volume."; };
    user = lib.mkOption { type = lib.types.str; default = "mqlab"; description = "Unix user running the broker."; };
    runtimeInputs = lib.mkOption { type = lib.types.listOf lib.types.package; default = [ ]; description = "Packages on the services' PATH."; };
    services = lib.mkOption {
      type = lib.types.attrsOf lib.types.str;
      default = { };
      description = "systemd services (name -> start script) making up the broker on this node.";
    };
  };

  config = {
    system.stateVersion = "26.05";

    services.openssh = {
      enable = true;
      openFirewall = true;
      settings = {
        PasswordAuthentication = false;
        KbdInteractiveAuthentication = false;
        PermitRootLogin = "prohibit-password";
      };
    };

    networking.firewall = {
      enable = true;
      allowPing = true;
      extraCommands = firewallRules;
    };

    # Amazon Time Sync Service, reachable from every instance at a link-local address
    networking.timeServers = [ "169.254.169.123" ];
    services.timesyncd.enable = false;
    services.chrony = {
      enable = true;
      servers = [ ];
      extraConfig = ''
        server 169.254.169.123 prefer iburst minpoll 4 maxpoll 4
        makestep 1.0 3
      '';
    };

    # Kernel: the LTS kernel of the pinned nixpkgs (recorded by the revision).
    # sysctl settings, each for a reason:
    boot.kernel.sysctl = {
      "net.core.somaxconn" = 4096; # many client connections per broker
      "net.ipv4.tcp_max_syn_backlog" = 8192; # connection bursts when workers start
      "net.core.rmem_max" = 16777216; # allow 16 MiB socket buffers (replication links)
      "net.core.wmem_max" = 16777216;
      "net.ipv4.tcp_rmem" = "4096 131072 16777216";
      "net.ipv4.tcp_wmem" = "4096 131072 16777216";
      "net.ipv4.ip_local_port_range" = "10240 65535"; # many client sockets on workers
      "vm.swappiness" = 1; # keep broker heaps and page cache resident
      "vm.max_map_count" = 262144; # Kafka/Redpanda/Pulsar map many segment files
      "fs.file-max" = 2097152;
    };

    users.users.${config.mqlab.node.user} = { isSystemUser = true; group = config.mqlab.node.user; home = cfg.dataDir; };
    users.groups.${config.mqlab.node.user} = { };

    environment.etc."mqlab/broker.json".text = builtins.toJSON brokerJson;
    environment.systemPackages = [ pkgs.jq pkgs.sysstat pkgs.chrony pkgs.iproute2 ]
      ++ lib.optional (cfg.package != null) cfg.package;

    systemd.services = {
      mqlab-node = {
        description = "mqlab: read this node's index and peers from EC2 user data";
        wantedBy = [ "multi-user.target" ];
        after = [ "network-online.target" ];
        wants = [ "network-online.target" ];
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          ExecStart = "${nodeTool} bootstrap --broker ${cfg.broker} --out /run/mqlab";
        };
      };
      mqlab-data-volume = {
        description = "mqlab: format (first boot) and mount the EBS data volume";
        wantedBy = [ "multi-user.target" ];
        path = [ pkgs.util-linux pkgs.xfsprogs pkgs.coreutils pkgs.gnugrep ];
        serviceConfig = { Type = "oneshot"; RemainAfterExit = true; };
        script = ''
          set -eu
          mkdir -p ${cfg.dataDir}
          if mountpoint -q ${cfg.dataDir}; then exit 0; fi
          root=$(lsblk -no PKNAME "$(findmnt -no SOURCE /)")
          # the data volume: the first whole disk that is not the root disk and has no partitions
          dev=$(lsblk -dnpo NAME,TYPE | while read -r name type; do
            [ "$type" = disk ] || continue
            [ "$(basename "$name")" = "$root" ] && continue
            [ "$(lsblk -no NAME "$name" | wc -l)" -eq 1 ] && { echo "$name"; break; }
          done)
          if [ -z "$dev" ]; then echo "mqlab: no EBS data volume attached" >&2; exit 1; fi
          blkid "$dev" >/dev/null || mkfs.xfs -L mqlab-data "$dev"
          mount -o noatime "$dev" ${cfg.dataDir}
          chown ${cfg.user}:${cfg.user} ${cfg.dataDir}
        '';
      };
    }
    // lib.mapAttrs
      (name: script: serviceBase // {
        description = "mqlab ${cfg.broker}: ${name}";
        serviceConfig = serviceBase.serviceConfig // {
          ExecStartPre = "+${nodeTool} render --node /run/mqlab/node.json --image /etc/mqlab/broker.json --out /run/mqlab/conf";
          ExecStart = "${pkgs.writeShellScript name script}";
        };
      })
      cfg.services;
  };
}
