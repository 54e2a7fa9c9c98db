"""mqlab's NFQUEUE link impairer, a program of its own shipped to lab hosts."""
