package sites

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/agent/runtime"
)

// A site nobody visits gives its memory back and wakes on its next
// request, whatever the door: an edge's connection through the node's
// ingress, an SSH session, or an operation that runs in its container.
// It goes through two depths:
//
//   - dozing: its processes frozen by the cgroup freezer and its memory
//     pushed to compressed swap; a wake thaws it (milliseconds).
//   - asleep: its container's task gone, everything else kept (disk,
//     database, network namespace and address); a wake starts the task
//     again and waits until Apache listens.
//
// Only inbound traffic keeps a site awake: what its own PHP does (cron,
// a loop it started, requests to itself) is frozen or stopped with it.

// Depth is how deeply a site sleeps: "" (awake), Dozing or Asleep.
type Depth string

// The depths a site sleeps at.
const (
	Awake  Depth = ""
	Dozing Depth = "dozing"
	Asleep Depth = "asleep"
)

// Door is what woke a site, for the operator's metrics.
type Door string

// The doors a site is woken through.
const (
	DoorEdge  Door = "edge"  // a request through an edge (the node's ingress)
	DoorSSH   Door = "ssh"   // an SSH or SFTP session
	DoorAPI   Door = "api"   // an operation in its container (files, plugins, PHP...)
	DoorLogin Door = "login" // a one-time login link minted for it
	DoorNode  Door = "node"  // the node's own work (a scheduled snapshot)
)

// ErrWake says a site could not be woken; the error says why.
var ErrWake = errors.New("the site could not be woken")

// SleepRuntime is what sleeping and waking need of the runtime.
type SleepRuntime interface {
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
	Frozen(id string) (bool, error)
	Reclaim(ctx context.Context, id string) error
	Halt(ctx context.Context, id string) error
}

// presence is one site's sleep and wake bookkeeping (not its record's
// Depth, which is what is persisted).
type presence struct {
	// awake is set while the site is awake and nothing is changing that:
	// the path every request takes reads only it and stores last.
	awake atomic.Bool
	// last is the unix nanoseconds of the latest inbound traffic (or of
	// when the agent first saw the site): what idle time counts from.
	last atomic.Int64
	// request is last's time of a request proper (0 none yet), for the
	// control plane's lastRequestAt.
	request atomic.Int64

	mu sync.Mutex
	// busy is set while a transition runs (doze, sleep, wake); done is
	// closed when it ends; waking says it is a wake.
	busy, waking bool
	done         chan struct{}
	// holds counts operations that need the site running: no transition
	// to sleep starts while any is held.
	holds int
	// failed is the last wake's error, until a wake succeeds; until
	// retry, a wake is not tried again (each failure doubles the wait, up
	// to maxWakeBackoff): a site that cannot start does not start a
	// container for every request.
	failed  error
	retry   time.Time
	backoff time.Duration
}

// Waits between failed wakes of a site.
const (
	minWakeBackoff = time.Second
	maxWakeBackoff = time.Minute
)

func (m *Manager) presence(id string) *presence {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.presences[id]
	if !ok {
		p = &presence{}
		p.last.Store(m.now().UnixNano())
		s := m.sites[id]
		p.awake.Store(s != nil && s.Depth == Awake)
		if s != nil { // a site that is not here gets no entry
			m.presences[id] = p
		}
	}
	return p
}

// Touch records inbound traffic for a site and wakes it first if it
// sleeps: requests that arrive during a wake wait for that one wake.
// A site that is not here, or stopped, is left to its caller to refuse.
func (m *Manager) Touch(ctx context.Context, id string) error {
	p := m.presence(id)
	p.traffic(m.now())
	if p.awake.Load() {
		return nil
	}
	release, err := m.awaken(ctx, id, p, DoorEdge, false, false)
	if err != nil {
		return err
	}
	release()
	return nil
}

// Hold wakes a site if it sleeps and keeps it awake until release is
// called: what runs in its container (a command, a file operation, a
// session) is never frozen or stopped under it. It counts as traffic.
func (m *Manager) Hold(ctx context.Context, id string, door Door) (release func(), err error) {
	p := m.presence(id)
	p.traffic(m.now())
	return m.awaken(ctx, id, p, door, true, true)
}

// Wake starts waking a site in the background (a login link was just
// minted for it: its visitor is on the way) and counts as traffic.
func (m *Manager) Wake(id string, door Door) {
	p := m.presence(id)
	p.traffic(m.now())
	if p.awake.Load() {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		defer cancel()
		if release, err := m.awaken(ctx, id, p, door, false, false); err == nil {
			release()
		}
	}()
}

// HoldQuiet is Hold for the node's own work on a site (a scheduled
// snapshot): it wakes and holds the site but is no traffic, so the site
// goes back to sleep once it is done.
func (m *Manager) HoldQuiet(ctx context.Context, id string) (release func(), err error) {
	return m.awaken(ctx, id, m.presence(id), DoorNode, true, false)
}

// traffic records an inbound request at now.
func (p *presence) traffic(now time.Time) {
	p.last.Store(now.UnixNano())
	p.request.Store(now.UnixNano())
}

// awaken waits for a transition under way, then wakes the site when it
// is not awake; with hold, it counts one hold that release gives back
// (and, with traffic, records the end of the hold as traffic).
func (m *Manager) awaken(ctx context.Context, id string, p *presence, door Door, hold, traffic bool) (func(), error) {
	p.mu.Lock()
	for {
		if p.busy {
			done, waking := p.done, p.waking
			p.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			p.mu.Lock()
			if waking && p.failed != nil {
				// The wake this caller waited for failed: it is told so, and
				// the next request tries again.
				err := p.failed
				p.mu.Unlock()
				return nil, err
			}
			continue
		}
		s := m.get(id)
		if s == nil || s.Stopped || s.Depth == Awake {
			// Nothing to wake: the caller's own errors say why.
			break
		}
		if p.failed != nil && m.now().Before(p.retry) {
			err := p.failed
			p.mu.Unlock()
			return nil, err
		}
		// This caller wakes it for every waiter; the wake runs on even if
		// the caller gives up.
		p.busy, p.waking, p.done = true, true, make(chan struct{})
		done := p.done
		p.mu.Unlock()
		go m.wake(id, p, s.Depth, door)
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		p.mu.Lock()
		if p.failed != nil {
			err := p.failed
			p.mu.Unlock()
			return nil, err
		}
	}
	if !hold {
		p.mu.Unlock()
		return func() {}, nil
	}
	p.holds++
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			if traffic { // idle time counts from the end of the operation
				p.last.Store(m.now().UnixNano())
			}
			p.mu.Lock()
			p.holds--
			p.mu.Unlock()
		})
	}, nil
}

// wakeTimeout bounds one wake: a thaw, or a start until Apache listens.
const wakeTimeout = 30 * time.Second

// wake brings a site back from depth and ends the transition p.busy
// marks.
func (m *Manager) wake(id string, p *presence, depth Depth, door Door) {
	start := m.now()
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	err := m.wakeFrom(ctx, id, depth)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrWake, err)
		m.log.Warn("site did not wake", "site_id", id, "depth", depth, "door", door, "err", err)
	} else {
		m.log.Debug("site woke", "site_id", id, "depth", depth, "door", door, "ms", m.now().Sub(start).Milliseconds())
	}
	if m.cfg.Observe != nil {
		m.cfg.Observe.Woke(depth, door, m.now().Sub(start), err)
	}
	p.mu.Lock()
	p.failed = err
	if err == nil {
		p.awake.Store(true)
		p.backoff = 0
	} else {
		p.backoff = min(max(2*p.backoff, minWakeBackoff), maxWakeBackoff)
		p.retry = m.now().Add(p.backoff)
	}
	p.busy, p.waking = false, false
	close(p.done)
	p.mu.Unlock()
}

// wakeFrom wakes a site under its lock: a change of its container under
// way (lockPinned) ends first, and what it left is woken from, which may
// be nothing (both steps are idempotent).
func (m *Manager) wakeFrom(ctx context.Context, id string, depth Depth) error {
	rt, ok := m.cfg.Runtime.(SleepRuntime)
	if !ok {
		return errors.New("the runtime cannot freeze containers")
	}
	if err := m.makeRoom(ctx, id); err != nil {
		return err
	}
	defer m.Lock(id)()
	s := m.get(id)
	switch {
	case s == nil:
		return ErrNotFound
	case s.Stopped:
		return fmt.Errorf("%w: site %s is stopped", ErrInvalid, id)
	case s.Depth == Awake:
		return nil
	}
	cid := containerID(id)
	// Whatever the depth, nothing stays frozen: a task killed half-way,
	// or frozen by hand, would take connections and never answer.
	if err := rt.Thaw(ctx, cid); err != nil && !errors.Is(err, runtime.ErrNoCgroup) {
		return err
	}
	if pf, ok := rt.(prefetcher); ok && depth == Dozing {
		// Its memory comes back from swap on another core while the
		// request that woke it is served (bounded, best effort).
		go func() { _ = pf.Prefetch(context.Background(), cid) }()
	}
	if running, err := m.cfg.Runtime.Running(ctx, cid); err != nil {
		return err
	} else if !running || depth == Asleep {
		// Asleep, or dozing with its task gone (it crashed): started.
		ip := s.IP
		netns, err := m.attach(ctx, s)
		if err != nil {
			return err
		}
		if s.IP != ip {
			// Its address was taken meanwhile: the new one is recorded
			// (the ingress dials it) and written where the site reads it.
			if err := m.save(s); err != nil {
				return err
			}
			if err := m.rewriteConfig(s); err != nil {
				return err
			}
		}
		if err := m.cfg.Runtime.Run(ctx, m.spec(s, netns)); err != nil {
			return err
		}
		if err := m.waitListening(ctx, s); err != nil {
			// Nothing of a start that failed keeps running.
			_ = rt.Halt(context.WithoutCancel(ctx), cid)
			return err
		}
	}
	return m.setDepth(id, Awake)
}

// prefetcher is a runtime that can read a thawed container's swapped
// memory back ahead of use.
type prefetcher interface {
	Prefetch(ctx context.Context, id string) error
}

// setDepth records how deeply a site sleeps, so that an agent restart
// finds it as it was.
func (m *Manager) setDepth(id string, d Depth) error {
	s := m.get(id)
	if s == nil {
		return ErrNotFound
	}
	if s.Depth == d {
		return nil
	}
	s.Depth = d
	if d != Awake {
		s.SleptAt = m.now()
	}
	return m.save(s)
}

// waitListening waits until the site's web server takes connections: the
// request that woke it is the first Apache answers, with nothing before.
func (m *Manager) waitListening(ctx context.Context, s *Site) error {
	for wait := time.Millisecond; ; wait = min(wait*2, 20*time.Millisecond) {
		c, err := m.dial(ctx, "tcp", s.Addr())
		if err == nil {
			c.Close()
			return nil
		}
		if running, rerr := m.cfg.Runtime.Running(ctx, containerID(s.ID)); rerr == nil && !running {
			return fmt.Errorf("site %s exited while starting: %s", s.ID, m.logTail(s.ID))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("site %s did not listen: %w", s.ID, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Idle is how long a site may go without inbound traffic before it
// dozes, and how much longer before it sleeps.
type Idle struct {
	// Doze is the idle time before a site dozes; 0 never.
	Doze time.Duration
	// Sleep is the time a site dozes before it sleeps; 0 never. With no
	// Doze it is the idle time before an awake site sleeps.
	Sleep time.Duration
}

// PoolDoze is how long a pooled site stays awake after it is made (its
// first answer warmed its opcache) before it dozes until claimed.
const PoolDoze = 2 * time.Second

// idleOf is a site's idle times: its plan's doze time (Config.Idle's
// when it has none), or the node's when it overrides every plan.
func (m *Manager) idleOf(s *Site) Idle {
	if s.Pooled && !(m.cfg.IdleOverride && m.cfg.Idle == Idle{}) {
		// Made ahead for a claim: it dozes until then, and a claim thaws it.
		return Idle{Doze: PoolDoze}
	}
	if m.cfg.IdleOverride {
		return m.cfg.Idle
	}
	doze := m.cfg.Idle.Doze
	switch {
	case s.Limits.SleepAfterSeconds < 0:
		return Idle{}
	case s.Limits.SleepAfterSeconds > 0:
		doze = time.Duration(s.Limits.SleepAfterSeconds) * time.Second
	}
	return Idle{Doze: doze, Sleep: m.cfg.Idle.Sleep}
}

// Settle puts each site that has been idle long enough one depth
// deeper; the agent calls it every few seconds. A site with an
// operation under way, a transition of its own, or its lock taken is
// left for the next round.
func (m *Manager) Settle(ctx context.Context) {
	now := m.now()
	for _, s := range m.List() {
		if ctx.Err() != nil {
			return
		}
		if s.Stopped || s.UID == 0 || s.scratch() || s.Depth == Asleep {
			continue
		}
		idle := m.idleOf(&s)
		p := m.presence(s.ID)
		last := p.last.Load()
		quiet := now.Sub(time.Unix(0, last))
		var to Depth
		switch {
		case s.Depth == Awake && idle.Doze > 0 && quiet >= idle.Doze:
			to = Dozing
		case s.Depth == Awake && idle.Doze == 0 && idle.Sleep > 0 && quiet >= idle.Sleep:
			to = Asleep
		case s.Depth == Dozing && idle.Sleep > 0 && now.Sub(s.SleptAt) >= idle.Sleep:
			to = Asleep
		default:
			continue
		}
		if err := m.deepen(ctx, s.ID, p, s.Depth, to, last); err != nil && !errors.Is(err, ErrBusy) {
			m.log.Warn("site did not go to sleep", "site_id", s.ID, "depth", to, "err", err)
		}
	}
}

// ErrBusy says a site was not put to sleep: it is in use (a request
// or an operation under way, or traffic since its idle time was read).
var ErrBusy = errors.New("the site is in use")

// Doze and Sleep put one site to sleep at once, idle or not (tests,
// benchmarks and the operator's hand); a site in use is refused.
func (m *Manager) Doze(ctx context.Context, id string) error {
	return m.deepenNow(ctx, id, Dozing)
}

// Sleep: see Doze.
func (m *Manager) Sleep(ctx context.Context, id string) error {
	return m.deepenNow(ctx, id, Asleep)
}

func (m *Manager) deepenNow(ctx context.Context, id string, to Depth) error {
	s := m.get(id)
	if s == nil {
		return ErrNotFound
	}
	p := m.presence(id)
	return m.deepen(ctx, id, p, s.Depth, to, p.last.Load())
}

// deepen takes a site from depth from to depth to, unless something
// needs it: a hold, a transition, its lock (a lifecycle change), a wake
// since the caller looked (it is no longer at from), or traffic since
// last, the latest the caller judged it by (ErrBusy then).
func (m *Manager) deepen(ctx context.Context, id string, p *presence, from, to Depth, last int64) error {
	unlock, ok := m.tryLock(id)
	if !ok {
		return ErrBusy
	}
	defer unlock()
	s := m.get(id)
	if s == nil {
		return ErrNotFound
	}
	if s.Stopped || s.Depth == to || s.Depth == Asleep {
		return nil
	}
	if s.Depth != from {
		return ErrBusy // woken meanwhile: its idle time starts again
	}
	rt, ok := m.cfg.Runtime.(SleepRuntime)
	if !ok {
		return errors.New("the runtime cannot freeze containers")
	}
	p.mu.Lock()
	if p.busy || p.holds > 0 {
		p.mu.Unlock()
		return ErrBusy
	}
	p.busy, p.done = true, make(chan struct{})
	p.awake.Store(false)
	// A request that stored last before awake went false is seen here
	// (atomics are sequentially consistent), and one after it takes the
	// slow path and waits for this transition: none is left behind.
	if p.last.Load() != last {
		p.busy = false
		close(p.done)
		p.awake.Store(s.Depth == Awake)
		p.mu.Unlock()
		return ErrBusy
	}
	p.mu.Unlock()
	start := m.now()
	// Once started, a transition finishes even if the agent is stopping:
	// a task killed but not deleted would leave its shim behind.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeTimeout)
	defer cancel()
	err := m.deepenTo(tctx, rt, s, to)
	if m.cfg.Observe != nil {
		m.cfg.Observe.Slept(to, m.now().Sub(start), err)
	}
	p.mu.Lock()
	if err != nil {
		// Whatever half happened, a wake puts it right: thaw, or start.
		p.failed = nil
	}
	p.busy = false
	close(p.done)
	p.mu.Unlock()
	return err
}

func (m *Manager) deepenTo(ctx context.Context, rt SleepRuntime, s *Site, to Depth) error {
	cid := containerID(s.ID)
	switch to {
	case Dozing:
		// Recorded first: an agent that dies between the two finds it
		// dozing, and a wake thaws whatever was frozen.
		if err := m.setDepth(s.ID, Dozing); err != nil {
			return err
		}
		if err := rt.Freeze(ctx, cid); err != nil {
			return err
		}
		return rt.Reclaim(ctx, cid)
	case Asleep:
		if err := m.setDepth(s.ID, Asleep); err != nil {
			return err
		}
		return rt.Halt(ctx, cid)
	}
	return fmt.Errorf("no depth %q", to)
}

// tryLock takes a site's lock if nobody holds it.
func (m *Manager) tryLock(id string) (func(), bool) {
	m.mu.Lock()
	l, ok := m.locks[id]
	if !ok {
		l = &sync.Mutex{}
		m.locks[id] = l
	}
	m.mu.Unlock()
	if !l.TryLock() {
		return nil, false
	}
	return l.Unlock, true
}

// pin is for what changes a site's container under its lock: it waits
// for a transition under way and holds off new ones, and thaws a dozing
// site (a frozen task takes no signal), but leaves one asleep as it is:
// the change starts the container itself if it wants it running.
// settled, called when the change is done, records the depth the
// container is in then.
func (m *Manager) pin(ctx context.Context, id string) (settled func(), err error) {
	p := m.presence(id)
	p.mu.Lock()
	for p.busy {
		done := p.done
		p.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		p.mu.Lock()
	}
	p.holds++
	p.mu.Unlock()
	return func() {
		awake := true
		if s := m.get(id); s != nil && s.Depth == Asleep {
			running, err := m.cfg.Runtime.Running(context.WithoutCancel(ctx), containerID(id))
			if awake = err == nil && running; awake {
				_ = m.setDepth(id, Awake)
			}
		}
		p.last.Store(m.now().UnixNano())
		p.mu.Lock()
		p.holds--
		p.awake.Store(awake)
		p.mu.Unlock()
	}, nil
}

// Observer is told of every wake and every step deeper (metrics).
type Observer interface {
	Woke(from Depth, door Door, took time.Duration, err error)
	Slept(to Depth, took time.Duration, err error)
}

// LockAwake is for an operation that works inside a site's container
// under the site's lock: it wakes the site and holds it awake, then takes
// the lock (in that order: a wake takes the lock itself). unlock gives
// both back.
func (m *Manager) LockAwake(ctx context.Context, id string) (unlock func(), err error) {
	release, err := m.Hold(ctx, id, DoorAPI)
	if err != nil {
		return nil, err
	}
	l := m.Lock(id)
	return func() { l(); release() }, nil
}

// lockPinned is for a change of a site's container under its lock that
// does not need it running first (pin), and records the depth the change
// left it at before it unlocks.
func (m *Manager) lockPinned(ctx context.Context, id string) (unlock func(), err error) {
	settled, err := m.pin(ctx, id)
	if err != nil {
		return nil, err
	}
	l := m.Lock(id)
	// Thawed under the lock: a frozen task takes no signal, and the
	// record is not saved over by another change's copy.
	if s := m.get(id); s != nil && s.Depth == Dozing {
		if rt, ok := m.cfg.Runtime.(SleepRuntime); ok {
			_ = rt.Thaw(ctx, containerID(id))
		}
		_ = m.setDepth(id, Awake)
	}
	return func() { settled(); l() }, nil
}

// Presence is a site's sleep as the control plane is told it.
type Presence struct {
	ID    string
	Depth Depth
	// LastRequest is the site's latest inbound request since the agent
	// started; zero when none.
	LastRequest time.Time
}

// Presences lists every site's sleep, ordered by id.
func (m *Manager) Presences() []Presence {
	list := m.List()
	out := make([]Presence, 0, len(list))
	for _, s := range list {
		if s.scratch() {
			continue
		}
		pr := Presence{ID: s.ID, Depth: s.Depth}
		m.mu.Lock()
		p := m.presences[s.ID]
		m.mu.Unlock()
		if p != nil {
			if t := p.request.Load(); t != 0 {
				pr.LastRequest = time.Unix(0, t)
			}
		}
		out = append(out, pr)
	}
	return out
}

// memAvailable reads the host's available memory (bytes); a variable
// for tests.
var memAvailable = func() (avail, total int64, err error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "MemAvailable:":
			avail = n << 10
		case "MemTotal:":
			total = n << 10
		}
	}
	return avail, total, nil
}

// ErrNoRoom says a site was not woken: the node has no memory for it,
// even after putting its idlest sites to sleep.
var ErrNoRoom = errors.New("the node has no memory left to wake the site; try again shortly")

// makeRoom keeps a wake from running the host out of memory: below
// Config.WakeReserve of the host's memory available, the idlest awake
// sites (none in use) are put to sleep first, a few at a time, and the
// wake is refused if that is not enough. Waking every site of a node at
// once (a crawler on every URL) costs the longest idle ones, not MariaDB
// or the agent to the OOM killer.
func (m *Manager) makeRoom(ctx context.Context, waking string) error {
	reserve := m.cfg.WakeReserve
	if reserve <= 0 {
		return nil
	}
	for range 8 {
		avail, total, err := memAvailable()
		if err != nil || total == 0 || float64(avail) >= reserve*float64(total) {
			return nil
		}
		type idle struct {
			id   string
			last int64
		}
		var cands []idle
		for _, s := range m.List() {
			if s.ID == waking || s.Stopped || s.Depth == Asleep || s.scratch() {
				continue
			}
			cands = append(cands, idle{s.ID, m.presence(s.ID).last.Load()})
		}
		if len(cands) == 0 {
			break
		}
		sort.Slice(cands, func(i, j int) bool { return cands[i].last < cands[j].last })
		slept := 0
		for _, c := range cands[:min(len(cands), 4)] {
			s := m.get(c.id)
			if s == nil {
				continue
			}
			if m.deepen(ctx, c.id, m.presence(c.id), s.Depth, Asleep, c.last) == nil {
				slept++
				m.log.Info("site put to sleep to make room for another's wake", "site_id", c.id, "for", waking)
			}
		}
		if slept == 0 {
			break
		}
	}
	if avail, total, err := memAvailable(); err == nil && total > 0 && float64(avail) < reserve*float64(total) {
		return fmt.Errorf("%w (%d MiB of %d MiB available)", ErrNoRoom, avail>>20, total>>20)
	}
	return nil
}
