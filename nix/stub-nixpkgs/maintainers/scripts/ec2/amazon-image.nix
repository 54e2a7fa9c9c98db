# Stub of nixpkgs' nixos/maintainers/scripts/ec2/amazon-image.nix: the module
# that defines system.build.amazonImage (and imports the EC2 machine module).
{ config, pkgs, ... }:
{
  imports = [ ../../../modules/virtualisation/amazon-image.nix ];
  config.system.build.amazonImage = pkgs.stubPackage "nixos-amazon-image-${config.networking.hostName}" "stub";
}
