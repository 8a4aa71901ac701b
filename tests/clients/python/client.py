"""redis-py, in its default configuration, runs the shared client script and prints a transcript.

Usage: client.py PORT [--protocol 2]. The same transcript must come out against a real
redis-server and against Cloak (crates/cloak/tests/client_libs.rs compares them). Each step is
one line below; a step's result (or its error) is printed canonically, so adding a step is
adding a line.
"""

import sys

import redis

PORT = int(sys.argv[1])
PROTOCOL = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--protocol" else None
NAME = "cloak-client-py"

# Default options except the client name (and, for the RESP2 run, the protocol).
options = {"port": PORT, "client_name": NAME}
if PROTOCOL is not None:
    options["protocol"] = PROTOCOL
r = redis.Redis(**options)


def canonical(value):
    """One printable form for what redis-py returns in either protocol."""
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "backslashreplace"))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(canonical(v) for v in value) + "]"
    if isinstance(value, set):
        return "{" + ", ".join(sorted(canonical(v) for v in value)) + "}"
    if isinstance(value, dict):
        items = sorted((canonical(k), canonical(v)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if value is None:
        return "nil"
    return repr(value)


def step(name, run):
    try:
        result = canonical(run())
    except Exception as error:  # noqa: BLE001 - a failing step is part of the transcript
        result = f"error {type(error).__name__}: {error}"
    print(f"{name} -> {result}", flush=True)


def pipelined(*calls, transaction):
    pipe = r.pipeline(transaction=transaction)
    for call in calls:
        call(pipe)
    return pipe.execute(raise_on_error=False)


def info_fields(section, fields):
    info = r.info(section)
    return {field: info.get(field) for field in fields}


step("ping", lambda: r.ping())
step("echo", lambda: r.echo("hello"))
step("client getname", lambda: r.client_getname())
step("client id is an integer", lambda: isinstance(r.client_id(), int))
step("client list names me", lambda: [c["name"] for c in r.client_list() if c["name"] == NAME])
step("client info names me", lambda: r.client_info()["name"])
step("client setname", lambda: r.client_setname("renamed"))
step("client getname after", lambda: r.client_getname())
step("client setname bad", lambda: r.client_setname("has space"))
step("set", lambda: r.set("greeting", "hello"))
step("get", lambda: r.get("greeting"))
step("get missing", lambda: r.get("missing"))
step("set nx existing", lambda: r.set("greeting", "x", nx=True))
step("set xx missing", lambda: r.set("nobody", "x", xx=True))
step("mset", lambda: r.mset({"a": "1", "b": "2", "c": "3"}))
step("mget", lambda: r.mget(["a", "missing", "c"]))
step("exists", lambda: r.exists("a", "b", "missing", "a"))
step("del", lambda: r.delete("a", "missing"))
step("dbsize", lambda: r.dbsize())
step("pipeline", lambda: pipelined(
    lambda p: p.set("p1", "v1"), lambda p: p.get("p1"), lambda p: p.mget("p1", "nope"),
    lambda p: p.delete("p1"), lambda p: p.exists("p1"), transaction=False))
step("info server", lambda: info_fields("server", ["redis_mode"]))
step("info has version", lambda: "redis_version" in r.info())
step("info replication", lambda: info_fields("replication", ["role"]))
step("info persistence", lambda: info_fields("persistence", ["loading"]))
step("info clients", lambda: r.info("clients")["connected_clients"] >= 1)
step("info memory", lambda: r.info("memory")["used_memory"] > 0)
step("info keyspace", lambda: r.info("keyspace").get("db0", {}).get("keys"))
step("config get maxclients", lambda: r.config_get("maxclients"))
step("config get glob", lambda: sorted(r.config_get("maxmemory-p*")))
step("config get none", lambda: r.config_get("no-such-parameter"))
step("time", lambda: [type(part).__name__ for part in r.time()])
step("command count is positive", lambda: r.command_count() > 0)
step("command get is listed", lambda: b"get" in r.command_list())
step("unknown command", lambda: r.execute_command("NOSUCHCOMMAND", "x"))
step("wrong arity", lambda: r.execute_command("GET"))
step("echo wrong arity", lambda: r.execute_command("ECHO"))
step("select 0", lambda: r.execute_command("SELECT", "0"))
step("reset", lambda: r.execute_command("RESET"))
step("ping after reset", lambda: r.ping())
step("incr", lambda: r.incr("counter"))
step("incrby", lambda: r.incrby("counter", 5))
step("incr not an integer", lambda: r.incr("greeting"))
step("transaction", lambda: pipelined(
    lambda p: p.incr("counter"), lambda p: p.set("tx", "1"), lambda p: p.get("tx"),
    lambda p: p.expire("tx", 100), transaction=True))
step("set ex", lambda: r.set("temp", "x", ex=100))
step("ttl", lambda: r.ttl("temp"))
step("ttl of a transaction's key", lambda: r.ttl("tx"))
step("persist", lambda: r.persist("temp"))
step("ttl after persist", lambda: r.ttl("temp"))
step("cleanup", lambda: r.delete("greeting", "b", "c", "counter", "tx", "temp"))
step("dbsize after cleanup", lambda: r.dbsize())
step("quit", lambda: r.execute_command("QUIT"))
