// The cluster script: go-redis's ClusterClient, in its default configuration, against any node
// of a cluster (`go-client --cluster PORT`). The same transcript must come out against a real
// Redis Cluster and against a Cloak cluster (crates/cloak/tests/client_libs.rs compares them);
// nothing printed depends on node ids or ports, which differ between the two.
package main

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"
)

func runCluster(port string) {
	// Default options: the client learns the slots from CLUSTER SLOTS and follows MOVED.
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:" + port}})
	defer rdb.Close()
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%d", i)
	}

	step("cluster keyslot", func() (interface{}, error) { return result[int64](rdb.ClusterKeySlot(ctx, "{user1}.following")) })
	step("slot ranges", func() (interface{}, error) {
		slots, err := rdb.ClusterSlots(ctx).Result()
		covered := 0
		for _, s := range slots {
			covered += s.End - s.Start + 1
		}
		return covered, err
	})
	step("set across slots", func() (interface{}, error) {
		for _, key := range keys {
			if err := rdb.Set(ctx, key, "v-"+key, 0).Err(); err != nil {
				return nil, err
			}
		}
		return "OK", nil
	})
	step("get across slots", func() (interface{}, error) {
		values := make([]string, len(keys))
		for i, key := range keys {
			value, err := rdb.Get(ctx, key).Result()
			if err != nil {
				return nil, err
			}
			values[i] = value
		}
		return values, nil
	})
	step("mset tagged", func() (interface{}, error) { return result[string](rdb.MSet(ctx, "{user1}.a", "1", "{user1}.b", "2")) })
	step("mget tagged", func() (interface{}, error) {
		return result[[]interface{}](rdb.MGet(ctx, "{user1}.a", "{user1}.b", "{user1}.missing"))
	})
	step("mget across slots", func() (interface{}, error) { return result[[]interface{}](rdb.MGet(ctx, "key:1", "key:2")) })
	step("del across slots", func() (interface{}, error) { return result[int64](rdb.Del(ctx, "key:1", "key:2")) })
	step("pipeline across slots", func() (interface{}, error) {
		cmds, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, key := range keys[3:10] {
				pipe.Get(ctx, key)
			}
			pipe.Incr(ctx, "counter")
			return nil
		})
		out := make([]string, len(cmds))
		for i, cmd := range cmds {
			out[i] = cmd.String()
		}
		return out, err
	})
	step("transaction in one slot", func() (interface{}, error) {
		cmds, err := rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Incr(ctx, "{user1}.n")
			pipe.Get(ctx, "{user1}.a")
			return nil
		})
		out := make([]string, len(cmds))
		for i, cmd := range cmds {
			out[i] = cmd.String()
		}
		return out, err
	})
	step("hash", func() (interface{}, error) {
		if err := rdb.HSet(ctx, "{user1}.h", "f", "v", "g", "w").Err(); err != nil {
			return nil, err
		}
		return result[map[string]string](rdb.HGetAll(ctx, "{user1}.h"))
	})
	step("dbsize of every master", func() (interface{}, error) {
		// ForEachMaster calls the masters concurrently.
		var mutex sync.Mutex
		var total int64
		err := rdb.ForEachMaster(ctx, func(ctx2 context.Context, master *redis.Client) error {
			n, err := master.DBSize(ctx2).Result()
			mutex.Lock()
			defer mutex.Unlock()
			total += n
			return err
		})
		return total, err
	})
	step("keys of every master", func() (interface{}, error) {
		var mutex sync.Mutex
		var all []string
		err := rdb.ForEachMaster(ctx, func(ctx2 context.Context, master *redis.Client) error {
			found, err := master.Keys(ctx2, "*").Result()
			mutex.Lock()
			defer mutex.Unlock()
			all = append(all, found...)
			return err
		})
		sort.Strings(all)
		return all, err
	})
	step("delete", func() (interface{}, error) {
		var deleted int64
		for _, key := range append(keys, "counter", "{user1}.a", "{user1}.b", "{user1}.n", "{user1}.h") {
			n, err := rdb.Del(ctx, key).Result()
			if err != nil {
				return nil, err
			}
			deleted += n
		}
		return deleted, nil
	})
}
