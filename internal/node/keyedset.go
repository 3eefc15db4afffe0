package node

import (
	"maps"
	"slices"
	"sync"
)

// keyedSet is a set of values per string key, safe for concurrent use.
// The node keeps two: the open connections of each container and the
// workers holding a standby for each template.
type keyedSet[V comparable] struct {
	mu  sync.Mutex
	all map[string]map[V]struct{}
}

func (k *keyedSet[V]) add(key string, v V) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.all == nil {
		k.all = map[string]map[V]struct{}{}
	}
	if k.all[key] == nil {
		k.all[key] = map[V]struct{}{}
	}
	k.all[key][v] = struct{}{}
}

func (k *keyedSet[V]) remove(key string, v V) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.all[key], v)
	if len(k.all[key]) == 0 {
		delete(k.all, key)
	}
}

// members returns key's values, in no particular order.
func (k *keyedSet[V]) members(key string) []V {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Collect(maps.Keys(k.all[key]))
}

// take removes key and returns its values.
func (k *keyedSet[V]) take(key string) []V {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := slices.Collect(maps.Keys(k.all[key]))
	delete(k.all, key)
	return out
}

// copyAll returns a copy of every non-empty key's members.
func (k *keyedSet[V]) copyAll() map[string][]V {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string][]V, len(k.all))
	for key, vs := range k.all {
		if len(vs) > 0 {
			out[key] = slices.Collect(maps.Keys(vs))
		}
	}
	return out
}
