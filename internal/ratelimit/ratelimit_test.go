package ratelimit

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestBucket: a burst, then refusals with the wait until the next token,
// a continuous refill, and keys that do not share a bucket.
func TestBucket(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	l := New(PerMinute(3), 0, c.now) // one token every 20 s
	type step struct {
		advance time.Duration
		key     string
		ok      bool
		wait    time.Duration
	}
	for i, s := range []step{
		{0, "a", true, 0},
		{0, "a", true, 0},
		{0, "a", true, 0},
		{0, "a", false, 20 * time.Second},
		{0, "b", true, 0}, // another key, its own bucket
		{5 * time.Second, "a", false, 15 * time.Second},
		{15 * time.Second, "a", true, 0},
		{0, "a", false, 20 * time.Second},
		{time.Hour, "a", true, 0}, // refills to the burst, no more
		{0, "a", true, 0},
		{0, "a", true, 0},
		{0, "a", false, 20 * time.Second},
	} {
		c.add(s.advance)
		if w := l.Wait(s.key); (w == 0) != s.ok {
			t.Fatalf("step %d: Wait = %s before Allow = %v", i, w, s.ok)
		}
		ok, wait := l.Allow(s.key)
		if ok != s.ok || wait != s.wait {
			t.Fatalf("step %d: Allow(%s) = %v, %s; want %v, %s", i, s.key, ok, wait, s.ok, s.wait)
		}
	}
	if w := l.Wait("never-seen"); w != 0 || l.Len() != 2 {
		t.Fatalf("an unknown key: wait %s, %d keys", w, l.Len())
	}
}

// TestRefund: a refunded token can be taken again, never above the
// burst; refunding an unknown key makes no bucket.
func TestRefund(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	l := New(PerHour(2), 0, c.now)
	for _, want := range []bool{true, true, false} {
		if ok, _ := l.Allow("a"); ok != want {
			t.Fatalf("Allow = %v, want %v", ok, want)
		}
	}
	l.Refund("a")
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("a refunded token cannot be taken")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("one refund gave back more than one token")
	}
	for range 5 {
		l.Refund("a")
	}
	for _, want := range []bool{true, true, false} {
		if ok, _ := l.Allow("a"); ok != want {
			t.Fatalf("after refunds past the burst: Allow = %v, want %v", ok, want)
		}
	}
	l.Refund("b")
	if l.Len() != 1 {
		t.Fatalf("refunding an unknown key: %d keys", l.Len())
	}
}

// TestOff: a zero rule limits nothing and keeps nothing.
func TestOff(t *testing.T) {
	for _, r := range []Rule{{}, {Rate: 1}, {Burst: 5}} {
		l := New(r, 0, nil)
		for range 100 {
			if ok, _ := l.Allow("k"); !ok {
				t.Fatalf("%+v limited", r)
			}
		}
		if l.Len() != 0 {
			t.Fatalf("%+v kept %d keys", r, l.Len())
		}
	}
}

// TestMemoryBounded: keys never exceed the cap; buckets that refilled
// completely are dropped as new keys come, so a key still being limited
// keeps its state through new arrivals while idle ones make room, and at
// the cap the least recently used key goes.
func TestMemoryBounded(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	l := New(Rule{Rate: 1, Burst: 2}, 10, c.now)
	l.Allow("limited")
	l.Allow("limited") // empty now
	for i := range 8 {
		l.Allow(fmt.Sprint("idle-", i))
	}
	if ok, _ := l.Allow("limited"); ok { // refused, and the most recently used
		t.Fatal("an empty bucket gave a token")
	}
	c.add(time.Second) // idle ones refill to 2 of 2; "limited" to 1 of 2
	for i := range 5 {
		l.Allow(fmt.Sprint("new-", i))
		if l.Len() > 10 {
			t.Fatalf("%d keys over a cap of 10", l.Len())
		}
	}
	if n := l.Len(); n != 6 {
		t.Fatalf("%d keys; the 8 idle ones should have made room", n)
	}
	if l.Wait("limited") != 0 {
		t.Fatal("limited should hold one token after a second")
	}
	if ok, _ := l.Allow("limited"); !ok {
		t.Fatal("limited lost its bucket")
	}
	if ok, _ := l.Allow("limited"); ok {
		t.Fatal("limited got a fresh bucket: its state was evicted before idle ones")
	}
	for i := range 100 { // only in-use keys left: the oldest go
		l.Allow(fmt.Sprint("flood-", i))
	}
	if l.Len() != 10 {
		t.Fatalf("%d keys, want the cap of 10", l.Len())
	}
}
