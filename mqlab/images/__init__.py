"""NixOS images (AMIs) per broker, built from flake.nix (see images/)."""
