"""redis-py's RedisCluster, in its default configuration, runs the cluster script and prints a
transcript.

Usage: cluster.py PORT (any node of the cluster). The same transcript must come out against a
real Redis Cluster and against a Cloak cluster (crates/cloak/tests/client_libs.rs compares
them). Each step is one line below; a step's result (or its error) is printed canonically.
Nothing printed depends on node ids or ports, which differ between the two.
"""

import sys

from redis.cluster import RedisCluster

from transcript import step

PORT = int(sys.argv[1])

# Default options: the client learns the slots from CLUSTER SLOTS and follows MOVED.
r = RedisCluster(host="127.0.0.1", port=PORT)


KEYS = [f"key:{i}" for i in range(30)]


def pipeline():
    pipe = r.pipeline()
    for key in KEYS[:10]:
        pipe.get(key)
    pipe.incr("counter")
    return pipe.execute()


step("nodes", lambda: len(r.get_primaries()))
step("keyslot", lambda: [r.keyslot(k) for k in ("foo", "{user1}.a", "{user1}.b")])
step("cluster keyslot", lambda: r.cluster_keyslot("{user1}.following"))
step("set across slots", lambda: [r.set(k, k.upper()) for k in KEYS])
step("get across slots", lambda: [r.get(k) for k in KEYS])
step("mset tagged", lambda: r.mset({"{user1}.a": "1", "{user1}.b": "2"}))
step("mget tagged", lambda: r.mget("{user1}.a", "{user1}.b", "{user1}.missing"))
step("mget across slots", lambda: r.mget_nonatomic(KEYS[:5]))
step("mset across slots", lambda: r.mset_nonatomic({"a": "1", "b": "2", "c": "3"}))
step("exists tagged", lambda: r.exists("{user1}.a", "{user1}.b", "{user1}.c"))
step("pipeline across slots", pipeline)
step("hash", lambda: (r.hset("{user1}.h", mapping={"f": "v", "g": "w"}), r.hgetall("{user1}.h")))
step("expire and ttl", lambda: (r.expire("a", 100), r.ttl("a")))
step("incr", lambda: r.incr("counter", 5))
step("dbsize of all", lambda: r.dbsize())
step("keys of all", lambda: sorted(r.keys(target_nodes=RedisCluster.ALL_NODES)))
step("scan of all", lambda: sorted(r.scan_iter(count=7)))
step("cross-slot error", lambda: r.execute_command("MGET", "a", "b", target_nodes=r.get_node_from_key("a")))
step("cluster info", lambda: r.cluster_info()["cluster_state"])
step("delete", lambda: r.delete(*KEYS, "a", "b", "c", "counter", "{user1}.a", "{user1}.b", "{user1}.h"))
step("dbsize after", lambda: r.dbsize())
r.close()
