"""The per-lab ed25519 key pair: the private half stays 0600 in the lab's state directory."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

PRIVATE_NAME = "id_ed25519"
PUBLIC_NAME = "id_ed25519.pub"


def ensure_key_pair(lab_dir: Path, comment: str) -> tuple[Path, str]:
    """Create the lab's key pair once; return (private key path, OpenSSH public key line)."""
    private = lab_dir / PRIVATE_NAME
    public = lab_dir / PUBLIC_NAME
    if private.exists() and public.exists():
        os.chmod(private, 0o600)
        return private, public.read_text().strip()
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    # Created with mode 0600 from the start: never readable by others, not even briefly.
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(private, 0o600)
    line = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    line = f"{line} {comment}"
    public.write_text(line + "\n")
    return private, line
