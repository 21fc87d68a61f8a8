// Package dnstest is an authoritative DNS server on loopback for tests:
// the records a test sets are what the custom-domain checks and Pebble's
// validation see, so no test asks a resolver outside this machine.
package dnstest

import (
	"net"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// T is what the servers need of a test: a testing.TB, or the stand-in a
// benchmark command brings.
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Server answers A, AAAA, CNAME and TXT queries from its records; a name
// with none is NXDOMAIN. Safe for concurrent use.
type Server struct {
	// Addr is host:port, the same for UDP and TCP.
	Addr string

	mu      sync.Mutex
	records map[string][]dns.RR
	udp     *dns.Server
	tcp     *dns.Server
}

// Start serves on 127.0.0.1 (a free port, UDP and TCP) until the test ends.
func Start(t T) *Server {
	t.Helper()
	s := &Server{records: map[string][]dns.RR{}}
	var pc net.PacketConn
	var ln net.Listener
	var err error
	for range 20 { // the same port free for both UDP and TCP
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Fatalf("dnstest: no port free for both UDP and TCP: %v", err)
	}
	s.Addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(s.serve)
	s.udp = &dns.Server{PacketConn: pc, Handler: h}
	s.tcp = &dns.Server{Listener: ln, Handler: h}
	go func() { _ = s.udp.ActivateAndServe() }()
	go func() { _ = s.tcp.ActivateAndServe() }()
	t.Cleanup(func() {
		_ = s.udp.Shutdown()
		_ = s.tcp.Shutdown()
	})
	return s
}

// Set replaces every record of name with the given ones, in zone-file
// form without the name: "A 127.0.0.1", "CNAME x.example.com.", `TXT "v"`.
// No records removes the name.
func (s *Server) Set(t T, name string, records ...string) {
	t.Helper()
	fq := dns.Fqdn(strings.ToLower(name))
	var rrs []dns.RR
	for _, r := range records {
		rr, err := dns.NewRR(fq + " 1 IN " + r)
		if err != nil {
			t.Fatalf("dnstest: record %q: %v", r, err)
		}
		rrs = append(rrs, rr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(rrs) == 0 {
		delete(s.records, fq)
		return
	}
	s.records[fq] = rrs
}

func (s *Server) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := strings.ToLower(q.Name)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Follow CNAMEs as a recursive resolver would for address queries.
	for range 8 {
		rrs, ok := s.records[name]
		if !ok {
			if len(m.Answer) == 0 {
				m.Rcode = dns.RcodeNameError
			}
			break
		}
		var next string
		for _, rr := range rrs {
			switch {
			case rr.Header().Rrtype == q.Qtype:
				m.Answer = append(m.Answer, rr)
			case rr.Header().Rrtype == dns.TypeCNAME && q.Qtype != dns.TypeCNAME:
				m.Answer = append(m.Answer, rr)
				next = strings.ToLower(rr.(*dns.CNAME).Target)
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	_ = w.WriteMsg(m)
}
