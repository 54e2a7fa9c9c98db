"""A multi-host lab on this machine: one network namespace and one sshd per host.

``up`` builds a lab of ``broker-N``, ``sender-N`` and ``receiver-N`` hosts that mqlab
reaches over SSH exactly like EC2 instances (same inventory, same Fabric code path):

- one Linux bridge per lab in the root namespace, holding the coordinator's address
  ``.1`` of the lab's private /24 (chosen inside 10.213.0.0/16 so that it overlaps no
  route, no address and no other lab on this machine);
- per host: a namespace ``mqlab-<lab>-<host>`` (``lo`` up, no default route: nothing
  leaves the machine), a veth pair (one end in the bridge, ``eth0`` inside with the
  address ``.10+n``), optionally netem delay on ``eth0``, its own sshd on ``<addr>:22``
  with its own host key, and its own "remote root" directory;
- one ed25519 key pair for the lab, a ``known_hosts`` file and ``inventory.json``.

Everything is journaled in ``state.json`` *before* it is created, so ``down`` removes
it all even after ``up`` was killed half-way; ``down`` also sweeps whatever carries the
lab's names (namespaces, links by name prefix or alias) in case the journal was lost.

The parts: ``plan`` (names, addresses, inventory), ``journal`` (state.json),
``machine`` (ip commands, processes), ``state`` (labs on disk, find, status) and ``lab``
(up, down).
"""
