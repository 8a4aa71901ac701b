// go-redis v9, in its default configuration, runs the shared client script and prints a
// transcript.
//
// Usage: go-client PORT (and go-client --cluster PORT for the cluster script, cluster.go). The same transcript must come out against a real redis-server and
// against Cloak (crates/cloak/tests/client_libs.rs compares them). Each step is one line in
// main; its result (or error) is printed canonically, so adding a step is adding a line.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const name = "cloak-client-go"

var ctx = context.Background()

// canonical is one printable form for what go-redis returns in either protocol.
func canonical(value interface{}) string {
	switch v := value.(type) {
	case nil:
		return "nil"
	case string:
		return fmt.Sprintf("%q", v)
	case []string:
		parts := make([]string, len(v))
		for i, s := range v {
			parts[i] = canonical(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case []interface{}:
		parts := make([]string, len(v))
		for i, s := range v {
			parts[i] = canonical(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]string:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = canonical(k) + ": " + canonical(v[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	default:
		return fmt.Sprintf("%v", v)
	}
}

func step(label string, run func() (interface{}, error)) {
	value, err := run()
	switch {
	case errors.Is(err, redis.Nil):
		fmt.Printf("%s -> nil\n", label)
	case err != nil:
		fmt.Printf("%s -> error: %v\n", label, err)
	default:
		fmt.Printf("%s -> %s\n", label, canonical(value))
	}
}

// result adapts any go-redis command to a step.
func result[T any](cmd interface{ Result() (T, error) }) (interface{}, error) {
	return cmd.Result()
}

// infoField reads one field of one INFO section the way tools parse it.
func infoField(rdb *redis.Client, section, field string) (interface{}, error) {
	text, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(text, "\r\n") {
		if value, ok := strings.CutPrefix(line, field+":"); ok {
			return value, nil
		}
	}
	return nil, fmt.Errorf("no %s in INFO %s", field, section)
}

// scanAll runs an iterator to its end: the set of keys it returned, sorted (Redis promises the
// set of keys a full iteration returns, not their order).
func scanAll(it *redis.ScanIterator) (interface{}, error) {
	seen := map[string]bool{}
	for it.Next(ctx) {
		seen[it.Val()] = true
	}
	keys := make([]string, 0, len(seen))
	for key := range seen {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys, it.Err()
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "--cluster" {
		runCluster(os.Args[2])
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go-client PORT, or go-client --cluster PORT")
		os.Exit(2)
	}
	// Default options except the address and the client name.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + os.Args[1], ClientName: name})
	defer rdb.Close()
	// One connection for the steps that change connection state.
	conn := rdb.Conn()
	defer conn.Close()

	step("ping", func() (interface{}, error) { return result[string](rdb.Ping(ctx)) })
	step("echo", func() (interface{}, error) { return result[string](rdb.Echo(ctx, "hello")) })
	step("client getname", func() (interface{}, error) { return result[string](rdb.ClientGetName(ctx)) })
	step("client id is positive", func() (interface{}, error) {
		id, err := rdb.ClientID(ctx).Result()
		return id > 0, err
	})
	step("client list names me", func() (interface{}, error) {
		list, err := rdb.ClientList(ctx).Result()
		return strings.Contains(list, " name="+name+" "), err
	})
	step("client setname", func() (interface{}, error) { return result[bool](conn.ClientSetName(ctx, "renamed")) })
	step("client getname after", func() (interface{}, error) { return result[string](conn.ClientGetName(ctx)) })
	step("client setname bad", func() (interface{}, error) { return result[bool](conn.ClientSetName(ctx, "has space")) })
	step("set", func() (interface{}, error) { return result[string](rdb.Set(ctx, "greeting", "hello", 0)) })
	step("get", func() (interface{}, error) { return result[string](rdb.Get(ctx, "greeting")) })
	step("get missing", func() (interface{}, error) { return result[string](rdb.Get(ctx, "missing")) })
	step("set nx existing", func() (interface{}, error) { return result[bool](rdb.SetNX(ctx, "greeting", "x", 0)) })
	step("mset", func() (interface{}, error) { return result[string](rdb.MSet(ctx, "a", "1", "b", "2", "c", "3")) })
	step("mget", func() (interface{}, error) { return result[[]interface{}](rdb.MGet(ctx, "a", "missing", "c")) })
	step("exists", func() (interface{}, error) { return result[int64](rdb.Exists(ctx, "a", "b", "missing", "a")) })
	step("del", func() (interface{}, error) { return result[int64](rdb.Del(ctx, "a", "missing")) })
	step("dbsize", func() (interface{}, error) { return result[int64](rdb.DBSize(ctx)) })
	step("pipeline", func() (interface{}, error) {
		pipe := rdb.Pipeline()
		set := pipe.Set(ctx, "p1", "v1", 0)
		get := pipe.Get(ctx, "p1")
		del := pipe.Del(ctx, "p1")
		exists := pipe.Exists(ctx, "p1")
		_, err := pipe.Exec(ctx)
		return []interface{}{set.Val(), get.Val(), del.Val(), exists.Val()}, err
	})
	step("info redis_mode", func() (interface{}, error) { return infoField(rdb, "server", "redis_mode") })
	step("info role", func() (interface{}, error) { return infoField(rdb, "replication", "role") })
	step("info loading", func() (interface{}, error) { return infoField(rdb, "persistence", "loading") })
	step("info keyspace", func() (interface{}, error) { return infoField(rdb, "keyspace", "db0") })
	step("config get maxclients", func() (interface{}, error) {
		return result[map[string]string](rdb.ConfigGet(ctx, "maxclients"))
	})
	step("time is recent", func() (interface{}, error) {
		now, err := rdb.Time(ctx).Result()
		return now.Year() >= 2024, err
	})
	step("command count is positive", func() (interface{}, error) {
		count, err := rdb.Do(ctx, "COMMAND", "COUNT").Int64()
		return count > 0, err
	})
	step("unknown command", func() (interface{}, error) { return rdb.Do(ctx, "NOSUCHCOMMAND", "x").Result() })
	step("wrong arity", func() (interface{}, error) { return rdb.Do(ctx, "GET").Result() })
	step("incr", func() (interface{}, error) { return result[int64](rdb.Incr(ctx, "counter")) })
	step("incrby", func() (interface{}, error) { return result[int64](rdb.IncrBy(ctx, "counter", 5)) })
	step("incr not an integer", func() (interface{}, error) { return result[int64](rdb.Incr(ctx, "greeting")) })
	step("transaction", func() (interface{}, error) {
		var incr *redis.IntCmd
		var get *redis.StringCmd
		var expire *redis.BoolCmd
		_, err := rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			incr = pipe.Incr(ctx, "counter")
			pipe.Set(ctx, "tx", "1", 0)
			get = pipe.Get(ctx, "tx")
			expire = pipe.Expire(ctx, "tx", 100*time.Second)
			return nil
		})
		return []interface{}{incr.Val(), get.Val(), expire.Val()}, err
	})
	step("set ex", func() (interface{}, error) { return result[string](rdb.Set(ctx, "temp", "x", 100*time.Second)) })
	step("ttl", func() (interface{}, error) { return result[time.Duration](rdb.TTL(ctx, "temp")) })
	step("ttl of a transaction's key", func() (interface{}, error) { return result[time.Duration](rdb.TTL(ctx, "tx")) })
	step("persist", func() (interface{}, error) { return result[bool](rdb.Persist(ctx, "temp")) })
	step("ttl after persist", func() (interface{}, error) { return result[time.Duration](rdb.TTL(ctx, "temp")) })
	step("cleanup", func() (interface{}, error) {
		return result[int64](rdb.Del(ctx, "greeting", "b", "c", "counter", "tx", "temp"))
	})
	step("dbsize after cleanup", func() (interface{}, error) { return result[int64](rdb.DBSize(ctx)) })
	scanKeys := []string{"scan:hash"}
	for i := 0; i < 30; i++ {
		scanKeys = append(scanKeys, fmt.Sprintf("scan:%d", i))
	}
	step("scan setup", func() (interface{}, error) {
		pairs := []interface{}{}
		for _, key := range scanKeys[1:] {
			pairs = append(pairs, key, "x")
		}
		if err := rdb.MSet(ctx, pairs...).Err(); err != nil {
			return nil, err
		}
		return result[int64](rdb.HSet(ctx, "scan:hash", "f", "v"))
	})
	step("scan by cursor", func() (interface{}, error) {
		seen := map[string]bool{}
		var cursor uint64
		for {
			keys, next, err := rdb.Scan(ctx, cursor, "scan:*", 7).Result()
			if err != nil {
				return nil, err
			}
			for _, key := range keys {
				seen[key] = true
			}
			if next == 0 {
				return len(seen), nil
			}
			cursor = next
		}
	})
	step("scan iterator", func() (interface{}, error) { return scanAll(rdb.Scan(ctx, 0, "scan:1*", 5).Iterator()) })
	step("scan iterator of a type", func() (interface{}, error) {
		return scanAll(rdb.ScanType(ctx, 0, "scan:*", 10, "hash").Iterator())
	})
	step("scan cleanup", func() (interface{}, error) { return result[int64](rdb.Del(ctx, scanKeys...)) })
}
