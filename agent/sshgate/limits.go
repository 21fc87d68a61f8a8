package sshgate

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// limiter counts open connections, overall and per client address.
type limiter struct {
	mu      sync.Mutex
	max     int
	perAddr int
	total   int
	by      map[netip.Prefix]int
}

func newLimiter(max, perAddr int) *limiter {
	return &limiter{max: max, perAddr: perAddr, by: map[netip.Prefix]int{}}
}

// addrKey is the client's IP, or its /64 for IPv6: one host holds a
// whole /64.
func addrKey(a net.Addr) netip.Prefix {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Prefix{}
	}
	ip := ap.Addr().Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// acquire takes a slot for a connection from a, or reports that a limit
// is reached; release gives the slot back (once).
func (l *limiter) acquire(a net.Addr) (release func(), ok bool) {
	k := addrKey(a)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max || l.by[k] >= l.perAddr {
		return nil, false
	}
	l.total++
	l.by[k]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.by[k]--; l.by[k] <= 0 {
				delete(l.by, k)
			}
		})
	}, true
}

// idleConn closes its connection once nothing has been read or written
// for idle. Its timer is stopped by Close.
type idleConn struct {
	net.Conn
	idle  time.Duration
	last  atomic.Int64 // UnixNano of the last read or write
	timer *time.Timer
}

func newIdleConn(c net.Conn, idle time.Duration) *idleConn {
	ic := &idleConn{Conn: c, idle: idle}
	ic.last.Store(time.Now().UnixNano())
	ic.timer = time.AfterFunc(idle, ic.check)
	return ic
}

// check runs on the timer: it closes an idle connection or waits for the
// rest of the time since the last activity.
func (c *idleConn) check() {
	since := time.Since(time.Unix(0, c.last.Load()))
	if since >= c.idle {
		c.Conn.Close()
		return
	}
	c.timer.Reset(c.idle - since)
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *idleConn) Close() error {
	c.timer.Stop()
	return c.Conn.Close()
}
