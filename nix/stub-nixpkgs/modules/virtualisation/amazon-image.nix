# Stub of nixpkgs' nixos/modules/virtualisation/amazon-image.nix (EC2 machine
# settings); here it only provides system.build.toplevel as a fake package.
{ config, pkgs, ... }:
{
  config.system.build.toplevel = pkgs.stubPackage "nixos-system-${config.networking.hostName}" "stub";
  config.ec2.stub = true;
}
