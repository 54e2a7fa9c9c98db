{
  description = "mqlab: a reproducible lab for benchmarking persistent, replicated message queues";

  # nixpkgs pinned to an exact commit of the nixos-26.05 stable branch, written in
  # the URL so the pin holds before a flake.lock exists (locking needs the network).
  # Source: NixOS/infra flake.lock at commit 004870719e1fb3346a6807e30e2279b2f32c691e
  # locks nixos-26.05-small to rev 78e9c786dc08cd4f3420c2395cd977206a9b1da2
  # (channel release nixos-26.05.10927.78e9c786dc08).
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/78e9c786dc08cd4f3420c2395cd977206a9b1da2";

  outputs = { self, nixpkgs }:
    let
      lib = nixpkgs.lib;
      b = builtins;
      systems = [ "x86_64-linux" "aarch64-linux" ];
      amiSystem = "x86_64-linux";

      # recorded by every run manifest (mqlab.provenance reads these env vars)
      flakeRev = self.rev or self.dirtyRev or "dirty";
      nixpkgsRev = nixpkgs.rev or "unknown";

      # one NixOS module per self-hosted broker: images/brokers/<broker>.nix
      brokers = b.map (f: lib.removeSuffix ".nix" f)
        (b.filter (f: lib.hasSuffix ".nix" f) (b.attrNames (b.readDir ./images/brokers)));
      nodeNames = brokers ++ [ "client" ];

      unfree = [ "terraform" "mongodb-ce" "redpanda-server" ];
      pkgsFor = system: import nixpkgs {
        inherit system;
        config.allowUnfreePredicate = p: b.elem (lib.getName p) unfree;
      };
      pythonFor = system: import ./nix/python.nix {
        pkgs = pkgsFor system;
        inherit lib flakeRev nixpkgsRev;
        src = self;
      };

      mkNode = name: lib.nixosSystem {
        system = amiSystem;
        specialArgs = {
          mqlabWorker = (pythonFor amiSystem).worker;
          mqlabProvenance = { inherit flakeRev nixpkgsRev; };
        };
        modules = [
          ./images/base.nix
          (if name == "client" then ./images/client.nix else ./images/brokers + "/${name}.nix")
          { networking.hostName = "mqlab-${name}"; }
        ];
      };
      nixosConfigurations = lib.genAttrs nodeNames mkNode;
    in
    {
      inherit nixosConfigurations;

      lib = { inherit brokers nodeNames flakeRev nixpkgsRev; };

      packages = lib.genAttrs systems (system:
        let p = pythonFor system; in
        {
          mqlab = p.mqlab;
          worker = p.worker;
          default = p.mqlab;
        }
        // lib.optionalAttrs (system == amiSystem) (lib.listToAttrs (b.map
          (n: lib.nameValuePair "ami-${n}" nixosConfigurations.${n}.config.system.build.amazonImage)
          nodeNames)));

      apps = lib.genAttrs systems (system: {
        default = { type = "app"; program = "${self.packages.${system}.mqlab}/bin/mqlab"; };
        worker = { type = "app"; program = "${self.packages.${system}.worker}/bin/mqlab-worker"; };
      });

      devShells = lib.genAttrs systems (system:
        let pkgs = pkgsFor system; in
        {
          default = pkgs.mkShell {
            packages = [ pkgs.terraform pkgs.uv pkgs.python3 pkgs.jdk17_headless pkgs.awscli2 pkgs.ruff ];
            # uv uses the interpreter from nixpkgs instead of downloading one
            UV_PYTHON_DOWNLOADS = "never";
            UV_PYTHON = "${pkgs.python3}/bin/python3";
            JAVA_HOME = "${pkgs.jdk17_headless}";
          };
        });

      checks = lib.genAttrs systems (system:
        let p = pythonFor system; in
        {
          mqlab = p.mqlab;
          worker = p.worker;
          worker-closure = p.workerClosureCheck;
        }
        // lib.optionalAttrs (system == amiSystem) (lib.listToAttrs (b.map
          (n: lib.nameValuePair "nixos-${n}" nixosConfigurations.${n}.config.system.build.toplevel)
          nodeNames)));
    };
}
