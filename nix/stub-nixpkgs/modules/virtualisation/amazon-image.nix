# Stub of nixpkgs' nixos/modules/virtualisation/amazon-image.nix: provides the
# attribute mqlab's flake reads (system.build.amazonImage) as a fake package.
{ config, pkgs, ... }:
{
  config.system.build.amazonImage = pkgs.stubPackage "nixos-amazon-image-${config.networking.hostName}" "stub";
  config.system.build.toplevel = pkgs.stubPackage "nixos-system-${config.networking.hostName}" "stub";
  config.ec2.stub = true;
}
