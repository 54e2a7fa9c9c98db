# A tiny stand-in for nixpkgs, used ONLY by mqlab's tests on machines that
# cannot fetch nixpkgs:  nix eval --override-input nixpkgs path:nix/stub-nixpkgs ...
# It provides just enough of `lib`, `nixosSystem`, `legacyPackages` and the
# amazon-image module for mqlab's flake logic and images/ modules to evaluate.
# It builds nothing real: packages are attribute sets with a fake outPath.
{
  description = "mqlab test stub standing in for nixpkgs (evaluation only)";
  outputs = { self }:
    let
      lib = import ./lib.nix;
      systems = [ "x86_64-linux" "aarch64-linux" ];
    in
    {
      lib = lib // {
        nixosSystem = args: import ./nixos.nix ({ inherit lib; stubPath = ./.; } // args);
      };
      legacyPackages = lib.genAttrs systems (system: import ./default.nix { inherit system; });
      rev = "0000000000000000000000000000000000000000";
    };
}
