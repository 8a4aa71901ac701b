"""redis-py, in its default configuration, runs the shared client script and prints a transcript.

Usage: client.py PORT [--protocol 2]. The same transcript must come out against a real
redis-server and against Cloak (crates/cloak/tests/client_libs.rs compares them). Each step is
one line below; a step's result (or its error) is printed canonically, so adding a step is
adding a line.
"""

import hashlib
import sys

import redis

from transcript import step

PORT = int(sys.argv[1])
PROTOCOL = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--protocol" else None
NAME = "cloak-client-py"

# Default options except the client name (and, for the RESP2 run, the protocol).
options = {"port": PORT, "client_name": NAME}
if PROTOCOL is not None:
    options["protocol"] = PROTOCOL
r = redis.Redis(**options)


def pipelined(*calls, transaction):
    pipe = r.pipeline(transaction=transaction)
    for call in calls:
        call(pipe)
    return pipe.execute(raise_on_error=False)


def info_fields(section, fields):
    info = r.info(section)
    return {field: info.get(field) for field in fields}


def redis_sha1(text):
    return hashlib.sha1(text.encode()).hexdigest()


def release_as(token):
    """A lock object that believes it holds `lock:job` with another token."""
    stranger = r.lock("lock:job", timeout=10)
    stranger.local.token = token
    return stranger.release()


def with_lock():
    with r.lock("lock:ctx", timeout=5, blocking_timeout=1):
        return r.exists("lock:ctx")


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
# Hashes; HGETALL is a map in RESP3 (a dict here either way only if the reply has the right type).
step("hset", lambda: r.hset("hh", mapping={"a": "1", "f": "1.5", "s": "abc"}))
step("hmset", lambda: r.hmset("hh", {"b": "2", "c": "3"}))
step("hgetall", lambda: r.hgetall("hh"))
step("hgetall raw", lambda: r.execute_command("HGETALL", "hh"))
step("hincrbyfloat", lambda: r.hincrbyfloat("hh", "f", 0.25))
step("hincrbyfloat new field", lambda: r.hincrbyfloat("hh", "g", 2))
step("hincrbyfloat not a float", lambda: r.hincrbyfloat("hh", "s", 1))
step("hincrbyfloat bad increment", lambda: r.execute_command("HINCRBYFLOAT", "hh", "f", "x"))
step("hincrbyfloat infinite increment", lambda: r.execute_command("HINCRBYFLOAT", "hh", "f", "inf"))
step("hincrbyfloat wrong type", lambda: r.execute_command("HINCRBYFLOAT", "lock:none", "f", "1") if r.set("lock:none", "x") else None)
step("hmset wrong arity", lambda: r.execute_command("HMSET", "hh", "a"))
step("hsetnx", lambda: [r.hsetnx("hh", "a", "9"), r.hsetnx("hh", "new", "9")])
step("hstrlen", lambda: [r.hstrlen("hh", "s"), r.hstrlen("hh", "none")])
step("config get as a map", lambda: r.execute_command("CONFIG", "GET", "maxclients"))

# SCAN: Redis promises only the set of keys a full iteration returns, not their order.
step("scan setup", lambda: [r.mset({f"scan:{i}": str(i) for i in range(30)}), r.hset("scan:hash", "f", "v")])
step("scan_iter match", lambda: sorted(set(r.scan_iter(match="scan:*"))))
step("scan_iter match count", lambda: sorted(set(r.scan_iter(match="scan:1*", count=5))))
step("scan_iter type hash", lambda: sorted(set(r.scan_iter(match="scan:*", _type="hash"))))
step("scan_iter type string", lambda: len(set(r.scan_iter(match="scan:*", _type="string"))))

# Scripting.
step("eval integer", lambda: r.eval("return 42", 0))
step("eval float truncates", lambda: r.eval("return 3.99", 0))
step("eval array stops at nil", lambda: r.eval("return {1, 'two', false, nil, 4}", 0))
step("eval nested", lambda: r.eval("return {1, {2, {3}}, 'a'}", 0))
step("eval true false nil", lambda: [r.eval("return true", 0), r.eval("return false", 0), r.eval("return nil", 0)])
step("eval status reply", lambda: r.eval("return redis.status_reply('FINE')", 0))
step("eval ok table", lambda: r.eval("return {ok='OKAY'}", 0))
step("eval err table", lambda: r.eval("return {err='My Error'}", 0))
step("eval error_reply", lambda: r.eval("return redis.error_reply('oops')", 0))
step("eval keys and argv", lambda: r.eval("redis.call('set', KEYS[1], ARGV[1]); return redis.call('get', KEYS[1])", 1, "ev", "val"))
step("eval numbers as arguments", lambda: r.eval("redis.call('set', KEYS[1], 1.5); return redis.call('get', KEYS[1])", 1, "ev"))
step("eval call error", lambda: r.eval("redis.call('set', KEYS[1], 'x'); return redis.call('incr', KEYS[1])", 1, "ev"))
step("eval pcall error", lambda: r.eval("local t = redis.pcall('incr', KEYS[1]); return t['err']", 1, "ev"))
step("eval status from call", lambda: r.eval("local t = redis.call('set', KEYS[1], 'y'); return t['ok']", 1, "ev"))
step("eval nil from call", lambda: r.eval("return redis.call('get', KEYS[1]) == false", 1, "missing"))
step("eval runtime error", lambda: r.eval("error('boom')", 0))
step("eval compile error", lambda: r.eval("retur", 0))
step("eval unknown command", lambda: r.eval("return redis.call('nosuch')", 0))
step("eval not allowed", lambda: r.eval("return redis.call('multi')", 0))
step("eval bad argument", lambda: r.eval("return redis.call('get', {})", 1, "ev"))
step("eval hgetall", lambda: r.eval("return redis.call('hgetall', KEYS[1])", 1, "hh"))
step("eval sha1hex", lambda: r.eval("return redis.sha1hex('abc')", 0))
step("eval negative numkeys", lambda: r.execute_command("EVAL", "return 1", "-1"))
step("eval too many numkeys", lambda: r.execute_command("EVAL", "return 1", "3", "a"))
step("eval_ro write", lambda: r.eval_ro("return redis.call('set', KEYS[1], 'x')", 1, "ev"))
step("eval_ro read", lambda: r.eval_ro("return redis.call('get', KEYS[1])", 1, "ev"))
step("evalsha unknown", lambda: r.evalsha("f" * 40, 0))
step("script load", lambda: r.script_load("return ARGV[1]"))
step("script exists", lambda: r.script_exists(r.script_load("return ARGV[1]"), "f" * 40))
step("evalsha loaded", lambda: r.evalsha(r.script_load("return ARGV[1]"), 0, "arg"))
step("evalsha upper case", lambda: r.evalsha(r.script_load("return ARGV[1]").upper(), 0, "arg"))
step("script flush", lambda: r.script_flush())
step("script exists after flush", lambda: r.script_exists(redis_sha1("return ARGV[1]")))

# redis-py's Lock: SET NX PX to acquire, Lua scripts (EVALSHA, EVAL on NOSCRIPT) for the rest.
lock = r.lock("lock:job", timeout=10)
other = r.lock("lock:job", timeout=10, blocking_timeout=0.3)
step("lock acquire", lambda: lock.acquire(blocking=False))
step("lock owned", lambda: lock.owned())
step("lock extend", lambda: lock.extend(5))
step("lock ttl after extend", lambda: 10000 < r.pttl("lock:job") <= 15000)
step("lock extend replacing ttl", lambda: lock.extend(20, replace_ttl=True))
step("lock ttl after replace", lambda: 15000 < r.pttl("lock:job") <= 20000)
step("lock reacquire", lambda: lock.reacquire())
step("lock ttl after reacquire", lambda: 5000 < r.pttl("lock:job") <= 10000)
step("second lock waits and times out", lambda: other.acquire())
step("lock release", lambda: lock.release())
step("lock owned after release", lambda: lock.owned())
step("second lock acquires now", lambda: other.acquire(blocking=False))
step("release with another token", lambda: release_as(b"not-the-owner"))
step("second lock release", lambda: other.release())
step("release of a released lock", lambda: other.release())
step("lock as context manager", lambda: with_lock())
step("lock cleanup", lambda: r.delete("hh", "ev", "lock:none", "scan:hash", *[f"scan:{i}" for i in range(30)]))
step("quit", lambda: r.execute_command("QUIT"))
