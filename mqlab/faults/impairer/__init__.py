"""A netem-like link impairer in userspace: delay, jitter and loss on a host's egress link.

Why: the kernels mqlab's lab hosts run on may lack ``sch_netem`` (here
``CONFIG_NET_SCH_NETEM`` is not set, so ``tc qdisc ... netem`` fails), but they have
NFQUEUE (``CONFIG_NETFILTER_NETLINK_QUEUE``, ``CONFIG_NETFILTER_XT_TARGET_NFQUEUE``,
reached through ``iptables``, nf_tables or legacy). So this program impairs a link from
userspace, in the host's network namespace:

- one iptables rule ``-I OUTPUT -o DEV -m comment --comment mqlab-impair-N -j NFQUEUE
  --queue-num N --queue-bypass`` sends every IPv4 packet this host sends out of ``DEV``
  to queue ``N`` (never loopback: the rule names the device);
- this process is bound to queue ``N`` over nfnetlink (``AF_NETLINK`` /
  ``NETLINK_NETFILTER``, metadata only, no payload copy) and gives each packet a verdict:
  ``NF_DROP`` with probability ``loss_pct / 100``, otherwise ``NF_ACCEPT`` at its own
  release time, arrival + a delay drawn uniformly in ``[delay - jitter, delay + jitter]``
  (clamped at 0); packets overtake each other when jitter says so, as with netem.

The rule carries ``--queue-bypass``: when no process is bound to the queue (the impairer
ended, or was killed), packets pass unimpaired; ``remove_rules`` deletes mqlab's rules
(only those carrying its comment) after a crash. An impairer killed with SIGKILL loses
the packets it held (the kernel drops them when the queue unbinds) and leaves its rule,
bypassed, until ``--remove-only``. The queue is bound fail-open: a full queue accepts
packets instead of dropping them.

``python -m mqlab.faults.impairer --dev eth0 --queue 7 --delay-ms 50 --jitter-ms 10
--loss-pct 2 [--seed N]`` binds the queue, adds the rule, prints ``ready`` and impairs
until SIGTERM, SIGINT or SIGHUP, or until its stdin reaches end of file (the coordinator
holds a pipe to it: when the coordinator goes away, the impairer ends too; so do not
start it with stdin on ``/dev/null``). On the way out it removes the rule, accepts every
packet it still holds, and prints one JSON line of counts (``packets``, ``dropped``,
``delayed``, ``enobufs``). ``--remove-only`` removes mqlab's leftover rules and exits.

Limits, compared with netem:

- userspace: each packet costs a few microseconds of CPU in one Python thread, and
  release times carry sub-millisecond scheduling noise (more on a loaded machine);
- egress only (the packets a host sends); a delay on one host's egress adds to every
  round trip through that host;
- IPv4 only (the rule is an ``iptables`` rule; IPv6 packets pass unimpaired);
- a held packet stays charged to its sending socket (netem orphans it), so one TCP
  connection keeps at most ``net.ipv4.tcp_limit_output_bytes`` inside the delay;
- GSO packets are queued whole (as netem holds them): a loss drops a whole TSO burst.
"""
