"""The cluster rig (issue 26): hosts in network namespaces on one machine —
one etcd, two PostgreSQL nodes under Patroni, two worker hosts and a
receiver — and the faults an HA deployment meets (the leader killed, a
planned switchover, a worker host cut off from the databases, the leader
cut off from etcd), each accounted for: delivered, duplicates against what
was in flight, lost, time to deliver again.

Modules, lowest first: netns (namespaces, bridge, firewall rules),
hosts (the processes on each host and Patroni's REST API), traffic (the
producer and the receiver's timeline), faults (one fault injected and
measured), rig (the whole rig for one replication mode). Used by
`python -m benchmarks cluster` and tests/ha/test_cluster.py; needs root,
`ip netns`, iptables, Patroni and etcd (`rig.unavailable()` says which is
missing).
"""
