"""Published reference results shipped as package data (see README.md here)."""
