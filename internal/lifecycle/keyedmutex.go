package lifecycle

import (
	"context"
	"sync"
)

// keyedMutex is a set of mutexes by key, created on demand and dropped
// when unused, so memory tracks actors in flight rather than all actors.
type keyedMutex[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*keyedLock
}

type keyedLock struct {
	ch      chan struct{} // holds one token while locked
	waiters int           // guarded by keyedMutex.mu
}

// lock waits for key's lock until ctx ends and returns its unlock func.
func (k *keyedMutex[K]) lock(ctx context.Context, key K) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[K]*keyedLock{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &keyedLock{ch: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.waiters++
	k.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; k.leave(key, l) }, nil
	case <-ctx.Done():
		k.leave(key, l)
		return nil, ctx.Err()
	}
}

// leave ends one holder's or waiter's use of key's lock l, dropping it
// when nobody else uses it.
func (k *keyedMutex[K]) leave(key K, l *keyedLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.waiters--
	if l.waiters == 0 {
		delete(k.locks, key)
	}
}

// tryLock takes key's lock if nobody holds or waits for it, returning its
// unlock func, or reports false.
func (k *keyedMutex[K]) tryLock(key K) (func(), bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, busy := k.locks[key]; busy {
		return nil, false
	}
	if k.locks == nil {
		k.locks = map[K]*keyedLock{}
	}
	l := &keyedLock{ch: make(chan struct{}, 1), waiters: 1}
	l.ch <- struct{}{}
	k.locks[key] = l
	return func() { <-l.ch; k.leave(key, l) }, true
}
